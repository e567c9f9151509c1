//! Deterministic synthetic traffic: a small seeded generator and Poisson
//! arrivals, so a run is the same for the same seed on every machine.

/// SplitMix64: tiny, fast, and good enough to draw arrival times.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

/// One request: which source sent it, and when (µs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Arrival {
    pub at_micros: u64,
    pub source: u32,
}

/// How sources' mean rates are spread, as multiples of the limit's rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// 0.2 to 1.8 times the limit, skewed low: about 30 % of sources over it.
    AroundTheLimit,
    /// 99 % of sources at 1 % to 50 % of the limit, 1 % at 1 to 3 times it:
    /// closer to what a public API sees.
    MostlyBelow,
}

impl Mix {
    fn factor(self, rng: &mut Rng) -> f64 {
        match self {
            Mix::AroundTheLimit => {
                let u = rng.unit();
                0.2 + 1.6 * u * u
            }
            Mix::MostlyBelow => {
                if rng.unit() < 0.99 {
                    0.01 + 0.49 * rng.unit()
                } else {
                    1.0 + 2.0 * rng.unit()
                }
            }
        }
    }
}

/// Poisson arrivals for `sources` clients over `duration_micros`, each with a
/// mean rate of `limit / window` times a factor drawn from `mix`. Returns the
/// arrivals in time order and each source's factor.
pub fn poisson_sources(
    rng: &mut Rng,
    mix: Mix,
    sources: u32,
    duration_micros: u64,
    limit_per_window: f64,
    window_micros: u64,
) -> (Vec<Arrival>, Vec<f64>) {
    let mut arrivals = Vec::new();
    let mut factors = Vec::with_capacity(sources as usize);
    for source in 0..sources {
        let factor = mix.factor(rng);
        factors.push(factor);
        let rate_per_micro = factor * limit_per_window / window_micros as f64;
        let mut t = 0.0;
        loop {
            t += -rng.unit().ln() / rate_per_micro;
            if t >= duration_micros as f64 {
                break;
            }
            arrivals.push(Arrival {
                at_micros: t as u64,
                source,
            });
        }
    }
    arrivals.sort_unstable();
    (arrivals, factors)
}

/// `count` arrivals from one source spread evenly over `[from, from + span)`.
pub fn even(source: u32, count: u64, from_micros: u64, span_micros: u64) -> Vec<Arrival> {
    (0..count)
        .map(|i| Arrival {
            at_micros: from_micros + i * span_micros / count.max(1),
            source,
        })
        .collect()
}
