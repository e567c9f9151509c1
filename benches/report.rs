//! Reads criterion's samples back and prints min/median/max per operation
//! and ratios against a peer measured in the same run; the tables that
//! judge the targets also go, as Markdown, to the file `BENCH_TABLES`
//! names, from which `bench/all.sh` writes BENCHMARKS.md.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Nanoseconds per iteration: (min, median, max) over criterion's samples.
pub type Spread = (f64, f64, f64);

fn criterion_dir() -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    target.join("criterion")
}

/// The spread of one benchmark's samples, if it ran.
pub fn spread(group: &str, id: &str) -> Option<Spread> {
    let path = criterion_dir()
        .join(group)
        .join(id)
        .join("new")
        .join("sample.json");
    let text = std::fs::read_to_string(path).ok()?;
    let numbers = |field: &str| -> Option<Vec<f64>> {
        let start = text.find(&format!("\"{field}\":["))? + field.len() + 4;
        let end = start + text[start..].find(']')?;
        text[start..end]
            .split(',')
            .map(|n| n.trim().parse().ok())
            .collect()
    };
    let iters = numbers("iters")?;
    let times = numbers("times")?;
    let mut per_iter: Vec<f64> = times.iter().zip(&iters).map(|(t, i)| t / i).collect();
    per_iter.sort_by(f64::total_cmp);
    let median = per_iter[per_iter.len() / 2];
    Some((per_iter[0], median, per_iter[per_iter.len() - 1]))
}

/// Prints each benchmark of `group` with its ratio to `baseline` (by median).
pub fn print_group(group: &str, ids: &[&str], baseline: &str) -> BTreeMap<String, Spread> {
    let mut found = BTreeMap::new();
    for id in ids {
        if let Some(s) = spread(group, id) {
            found.insert(id.to_string(), s);
        }
    }
    let base = found.get(baseline).map(|s| s.1);
    println!("\n{group} (ns per operation; ratio = median / median of {baseline})");
    println!(
        "  {:<34} {:>9} {:>9} {:>9} {:>7}",
        "", "min", "median", "max", "ratio"
    );
    for id in ids {
        if let Some(&(min, median, max)) = found.get(*id) {
            let ratio = base.map_or(String::from("-"), |b| format!("{:.2}", median / b));
            println!("  {id:<34} {min:>9.1} {median:>9.1} {max:>9.1} {ratio:>7}");
        }
    }
    found
}

/// A Markdown table: printed, and appended to the file `BENCH_TABLES`
/// names, if any.
pub struct Table {
    text: String,
}

impl Table {
    pub fn new(title: &str, note: &str, columns: &[&str]) -> Self {
        let mut text = format!("\n### {title}\n\n");
        if !note.is_empty() {
            text.push_str(&format!("{note}\n\n"));
        }
        text.push_str(&format!("| {} |\n", columns.join(" | ")));
        let rule: Vec<&str> = columns
            .iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { "---" } else { "---:" })
            .collect();
        text.push_str(&format!("|{}|\n", rule.join("|")));
        Self { text }
    }

    pub fn row(&mut self, cells: &[String]) {
        self.text.push_str(&format!("| {} |\n", cells.join(" | ")));
    }

    pub fn finish(self) {
        print!("{}", self.text);
        if let Some(path) = std::env::var_os("BENCH_TABLES") {
            use std::io::Write;
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .and_then(|mut file| file.write_all(self.text.as_bytes()));
            if let Err(err) = written {
                eprintln!("cannot append to {path:?}: {err}");
            }
        }
    }
}

/// Runs `iters` operations and returns how long they took.
pub type Batch<'a> = Box<dyn FnMut(u64) -> std::time::Duration + 'a>;

/// Times the contenders in interleaved rounds and prints, for each, the
/// median of its per-round ratio to the first contender (with the middle
/// half of those ratios). Returns each contender's ns per operation, round
/// by round, for ratios of differences.
///
/// On a shared machine a burst of someone else's work slows whatever runs
/// during it. Criterion runs each contender for seconds on end, so a burst
/// can land on one and not its peer; here every round times each contender
/// once, back to back, in a rotating order, for about `batch` each, so a
/// burst mostly shifts a whole round and the ratio within it holds. Each
/// timed batch follows an untimed run of the same contender, a quarter
/// batch or `warm_up` operations if more (enough to touch all its data).
pub fn paired(
    title: &str,
    contenders: &mut [(&str, Batch)],
    rounds: usize,
    batch: std::time::Duration,
    warm_up: u64,
) -> Vec<Vec<f64>> {
    // Enough operations for each batch to last about `batch`, found by
    // doubling until a batch lasts half that: a batch's fixed cost (starting
    // threads) must not pass for the cost of its operations.
    let iters: Vec<u64> = contenders
        .iter_mut()
        .map(|(_, run)| {
            let mut iters = 1u64;
            loop {
                let took = run(iters);
                if took >= batch / 2 || iters >= 1 << 40 {
                    let scale = batch.as_secs_f64() / took.as_secs_f64().max(1e-9);
                    return ((iters as f64 * scale) as u64).max(1);
                }
                iters *= 2;
            }
        })
        .collect();
    let count = contenders.len();
    let mut per_op = vec![Vec::with_capacity(rounds); count];
    for round in 0..rounds {
        for offset in 0..count {
            let i = (round + offset) % count;
            // Untimed, so that the timed batch finds its data back in cache
            // after the other contenders' batches pushed it out.
            (contenders[i].1)(warm_up.max(iters[i] / 4));
            let took = (contenders[i].1)(iters[i]);
            per_op[i].push(took.as_nanos() as f64 / iters[i] as f64);
        }
    }
    let quartiles = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        (at(0.25), at(0.5), at(0.75))
    };
    let note = format!(
        "{rounds} interleaved rounds; ratio: the median over rounds of ns / {}'s ns in the same round, with the middle half of those ratios.",
        contenders[0].0
    );
    let mut table = Table::new(title, &note, &["", "ns (median)", "ratio", "middle half"]);
    for (i, (name, _)) in contenders.iter().enumerate() {
        let ratios = per_op[i]
            .iter()
            .zip(&per_op[0])
            .map(|(a, b)| a / b)
            .collect();
        let ns = median(per_op[i].clone());
        let (low, ratio, high) = quartiles(ratios);
        table.row(&[
            name.to_string(),
            format!("{ns:.1}"),
            format!("**{ratio:.2}**"),
            format!("{low:.2}–{high:.2}"),
        ]);
    }
    table.finish();
    per_op
}

/// The middle value (the upper one of an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
