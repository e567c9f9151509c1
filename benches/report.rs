//! Reads criterion's samples back and prints min/median/max per operation
//! and ratios against a peer measured in the same run.

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
