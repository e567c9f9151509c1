//! A counter's or fixed window's state packed into one integer below 2^53,
//! for the policies whose counts are small enough: Redis keeps such a
//! string inside the key's object, with no allocation of its own. Where
//! each part sits, and why the index it keeps stays exact, is in
//! docs/design.md ("the integer state").

use super::window_script::EXACT_BITS;
use crate::algorithm::Algorithm;
use crate::policy::Policy;

/// How far back a clock may step and still be read exactly, µs: 2^31 ms.
const STEP_BACK_MICROS: u128 = (1 << 31) * 1_000;

/// Where each part of the state sits in the integer.
pub(super) struct IntegerState {
    /// The windows' greatest common divisor, µs.
    unit: u64,
    /// The stored index is `floor(t / unit)` modulo this power of two.
    modulus: u64,
    /// How many units ahead of now's a stored index may be read.
    ahead: u64,
    /// Each limit's window in units, and the bits of one of its counts.
    limits: Vec<(u64, u32)>,
    sliding: bool,
}

impl IntegerState {
    /// The packing for `policy`, whose keys live at most `lifetime_micros`,
    /// if every part fits in 53 bits with the index exact as above.
    pub(super) fn for_policy(policy: &Policy, lifetime_micros: u64) -> Option<Self> {
        let sliding = policy.algorithm() == Algorithm::SlidingCounter;
        let unit = policy
            .limits()
            .iter()
            .map(|limit| limit.window_micros())
            .fold(0, gcd);
        let mut count_bits = 0;
        let mut limits = Vec::with_capacity(policy.limits().len());
        for limit in policy.limits() {
            let bits = u32::BITS - limit.max().leading_zeros();
            count_bits += if sliding { 2 * bits } else { bits };
            limits.push((limit.window_micros() / unit, bits));
        }
        let index_bits = EXACT_BITS.checked_sub(count_bits)?;
        let modulus = 1u64 << index_bits;
        let ahead = STEP_BACK_MICROS.div_ceil(u128::from(unit));
        // What is left behind now, in µs, less a unit for the rounding of
        // both ends to whole units.
        let behind = (u128::from(modulus).checked_sub(ahead + 1)?) * u128::from(unit);
        if behind <= u128::from(lifetime_micros) + STEP_BACK_MICROS {
            return None;
        }
        Some(Self {
            unit,
            modulus,
            ahead: ahead as u64,
            limits,
            sliding,
        })
    }

    /// The count fields, least significant first: the limit's number (from
    /// 1), whether it is the previous window's count, and the field's bits.
    fn fields(&self) -> impl Iterator<Item = (usize, bool, u32)> + '_ {
        self.limits
            .iter()
            .enumerate()
            .rev()
            .flat_map(move |(i, &(_, bits))| {
                let previous = self.sliding.then_some((i + 1, true, bits));
                [Some((i + 1, false, bits)), previous].into_iter().flatten()
            })
    }

    /// Lua statements reading the number `v` into `k#`, `p#` and `c#` (the
    /// indices whole, rebuilt from `now`), as `#` runs over the limits.
    pub(super) fn decode(&self) -> Vec<String> {
        let mut lua = Vec::new();
        for (i, previous, bits) in self.fields() {
            let (name, size) = (if previous { "p" } else { "c" }, 1u64 << bits);
            lua.push(format!(
                "{name}{i} = v % {size}; v = (v - {name}{i}) / {size}"
            ));
        }
        let (unit, modulus) = (self.unit, self.modulus);
        lua.push(format!("local u = (now - now % {unit}) / {unit}"));
        lua.push(format!("local behind = (u % {modulus} - v) % {modulus}"));
        lua.push(format!(
            "if behind < {} then u = u - behind else u = u + ({modulus} - behind) end",
            modulus - self.ahead
        ));
        for (i, &(units, _)) in self.limits.iter().enumerate() {
            let i = i + 1;
            if units == 1 {
                lua.push(format!("k{i} = u"));
            } else {
                lua.push(format!("k{i} = (u - u % {units}) / {units}"));
            }
        }
        lua
    }

    /// A Lua expression of the integer to store, as decimal text, once
    /// every window is rolled to `now`, printed by `string.format('%d')`:
    /// Redis would otherwise print the number with `%.17g`, which costs it
    /// far more. `%d` goes through a C `long`, so this needs a 64-bit Redis.
    pub(super) fn encode(&self) -> String {
        let (unit, modulus) = (self.unit, self.modulus);
        let mut shift = 0;
        let mut terms = Vec::new();
        for (i, previous, bits) in self.fields() {
            let name = if previous { "p" } else { "c" };
            terms.push(match shift {
                0 => format!("{name}{i}"),
                _ => format!("{name}{i} * {}", 1u64 << shift),
            });
            shift += bits;
        }
        terms.push(format!(
            "(now - now % {unit}) / {unit} % {modulus} * {}",
            1u64 << shift
        ));
        format!("string.format('%d', {})", terms.join(" + "))
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Limit;

    fn packing(algorithm: Algorithm, limits: &[(u32, u64)]) -> Option<IntegerState> {
        let limits = limits
            .iter()
            .map(|&(max, ms)| Limit::new(max, Duration::from_millis(ms)).unwrap());
        let policy = Policy::new(algorithm, limits).unwrap();
        let lifetime = super::super::scripts::ttl_millis(&policy) * 1_000;
        IntegerState::for_policy(&policy, lifetime)
    }

    #[test]
    fn small_limits_pack_into_an_integer_below_two_to_the_53() {
        let state = packing(Algorithm::SlidingCounter, &[(10, 1_000), (100, 60_000)]).unwrap();
        // 4 + 4 + 7 + 7 bits of counts leave 31 for the index in seconds.
        assert_eq!(state.unit, 1_000_000);
        assert_eq!(state.modulus, 1 << 31);
        assert_eq!(state.limits, vec![(1, 4), (60, 7)]);
        assert_eq!(
            state.encode(),
            "string.format('%d', c2 + p2 * 128 + c1 * 16384 + p1 * 262144 \
             + (now - now % 1000000) / 1000000 % 2147483648 * 4194304)"
        );
        // Every field full is the largest integer a double holds exactly.
        assert_eq!(state.modulus << 22, 1 << EXACT_BITS);
        // Up to 2^31 ms ahead (2,147,484 s) reads as ahead, the rest of the
        // 2^31 s as behind.
        assert!(state.decode().contains(
            &"if behind < 2145336164 then u = u - behind else u = u + (2147483648 - behind) end"
                .to_string()
        ));
    }

    #[test]
    fn the_fixed_window_stores_no_previous_count() {
        let state = packing(Algorithm::FixedWindow, &[(10, 1_000), (100, 60_000)]).unwrap();
        assert_eq!(state.modulus, 1 << 42);
        assert!(!state.encode().contains('p'));
    }

    #[test]
    fn policies_that_cannot_be_exact_keep_the_binary_layout() {
        // Counts too wide: 2 * (17 + 20) bits.
        assert!(packing(
            Algorithm::SlidingCounter,
            &[(100_000, 1_000), (1_000_000, 60_000)]
        )
        .is_none());
        // A clock stepping back 24.8 days would not be told from one idle
        // that long: 19 bits of seconds span 6 days.
        assert!(packing(Algorithm::SlidingCounter, &[(100, 1_000), (1_000, 60_000)]).is_none());
        // The index must also span the key's lifetime, twenty years beside
        // a 1 ms window (2^39.2 ms): 45 bits do, 35 do not.
        let decade = 3_650 * 86_400_000;
        assert!(packing(Algorithm::SlidingCounter, &[(1, 1), (5, decade)]).is_some());
        assert!(packing(Algorithm::SlidingCounter, &[(1, 1), (255, decade)]).is_none());
    }

    #[test]
    fn windows_without_a_common_second_count_in_their_divisor() {
        let state = packing(Algorithm::SlidingCounter, &[(3, 1_500), (20, 4_000)]).unwrap();
        assert_eq!(state.unit, 500_000);
        assert_eq!(state.limits, vec![(3, 2), (8, 5)]);
        assert!(state.decode().contains(&"k1 = (u - u % 3) / 3".to_string()));
    }
}
