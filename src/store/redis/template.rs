//! Fills the Lua templates in `lua/` for one policy.
//!
//! A template is Lua with placeholders and a few directives, each on a
//! line of its own, so that the file still reads as the script it makes:
//!
//! * `{{name}}` stands for a value: the policy's, or inside `each` the
//!   limit's (which wins over the policy's of the same name);
//! * `--@each` … `--@end` repeats its lines once per limit;
//! * `--@if name` (or `--@if not name`) … `--@else` … `--@end` keeps one
//!   branch, by a flag of the policy's or the limit's.
//!
//! The templates are ours and fixed: a template that asks for a value or
//! flag no one gives, or whose blocks do not close, is a bug that debug
//! builds stop at, and the tests fill each template for many policies.

use std::fmt::Display;

/// The values and flags one template fill reads, for the policy or for one
/// of its limits.
#[derive(Default)]
pub(super) struct Vars {
    values: Vec<(&'static str, String)>,
    flags: Vec<(&'static str, bool)>,
}

impl Vars {
    pub(super) fn value(mut self, name: &'static str, value: impl Display) -> Self {
        self.values.push((name, value.to_string()));
        self
    }

    pub(super) fn flag(mut self, name: &'static str, on: bool) -> Self {
        self.flags.push((name, on));
        self
    }
}

/// `template` filled with `policy`'s values and, in its `each` blocks,
/// each of `limits` in turn.
pub(super) fn fill(template: &str, policy: &Vars, limits: &[Vars]) -> String {
    let lines: Vec<&str> = template.lines().collect();
    let mut filler = Filler {
        lines: &lines,
        at: 0,
        policy,
        limits,
        out: String::new(),
    };
    let end = filler.block(None, true);
    debug_assert!(end == Closed::Text, "a block closes that never opened");
    filler.out
}

struct Filler<'a> {
    lines: &'a [&'a str],
    at: usize,
    policy: &'a Vars,
    limits: &'a [Vars],
    out: String,
}

/// How a block ended.
#[derive(PartialEq)]
enum Closed {
    Else,
    End,
    Text,
}

impl Filler<'_> {
    /// Fills lines up to the end of the block, writing them if `emit`,
    /// inside the limit `limit` if any.
    fn block(&mut self, limit: Option<&Vars>, emit: bool) -> Closed {
        while let Some(line) = self.lines.get(self.at) {
            self.at += 1;
            let directive = line.trim_start().strip_prefix("--@");
            match directive.map(str::trim) {
                Some("end") => return Closed::End,
                Some("else") => return Closed::Else,
                Some("each") => {
                    let start = self.at;
                    if !emit || self.limits.is_empty() {
                        let end = self.block(limit, false);
                        debug_assert!(end == Closed::End, "--@each without --@end");
                        continue;
                    }
                    for each in self.limits {
                        self.at = start;
                        let end = self.block(Some(each), true);
                        debug_assert!(end == Closed::End, "--@each without --@end");
                    }
                }
                Some(condition) if condition.starts_with("if ") => {
                    let name = condition["if ".len()..].trim();
                    let (name, wanted) = match name.strip_prefix("not ") {
                        Some(name) => (name.trim(), false),
                        None => (name, true),
                    };
                    let holds = self.flag(limit, name) == wanted;
                    let mut end = self.block(limit, emit && holds);
                    if end == Closed::Else {
                        end = self.block(limit, emit && !holds);
                    }
                    debug_assert!(end == Closed::End, "--@if without --@end");
                }
                Some(unknown) => debug_assert!(false, "no such directive: --@{unknown}"),
                _ if emit => {
                    self.substitute(line, limit);
                    self.out.push('\n');
                }
                _ => {}
            }
        }
        Closed::Text
    }

    fn flag(&self, limit: Option<&Vars>, name: &str) -> bool {
        let found = limit
            .into_iter()
            .chain([self.policy])
            .find_map(|vars| vars.flags.iter().find(|(flag, _)| *flag == name));
        debug_assert!(found.is_some(), "the template asks for flag {name:?}");
        found.is_some_and(|(_, on)| *on)
    }

    fn substitute(&mut self, mut line: &str, limit: Option<&Vars>) {
        while let Some(open) = line.find("{{") {
            self.out.push_str(&line[..open]);
            let rest = &line[open + 2..];
            let Some(close) = rest.find("}}") else {
                self.out.push_str(&line[open..]);
                return;
            };
            let name = &rest[..close];
            let value = limit
                .into_iter()
                .chain([self.policy])
                .find_map(|vars| vars.values.iter().find(|(value, _)| *value == name));
            debug_assert!(value.is_some(), "the template asks for {name:?}");
            if let Some((_, value)) = value {
                self.out.push_str(value);
            }
            line = &rest[close + 2..];
        }
        self.out.push_str(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_blocks_and_branches() {
        let template = "\
a = {{a}}
--@each
  x{{i}} = {{w}} + {{a}}
  --@if big
  big{{i}}
  --@else
  small{{i}}
  --@end
--@end
--@if not record
judge only
--@end
done";
        let policy = Vars::default().value("a", 7).flag("record", false);
        let limits = [
            Vars::default()
                .value("i", 1)
                .value("w", 10)
                .flag("big", true),
            Vars::default()
                .value("i", 2)
                .value("w", 20)
                .flag("big", false),
        ];
        assert_eq!(
            fill(template, &policy, &limits),
            "a = 7\n  x1 = 10 + 7\n  big1\n  x2 = 20 + 7\n  small2\njudge only\ndone\n"
        );
    }
}
