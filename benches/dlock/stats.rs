//! Latency percentiles.

use std::time::Duration;

pub struct Summary {
    sorted: Vec<Duration>,
}

impl Summary {
    pub fn of(mut samples: Vec<Duration>) -> Summary {
        samples.sort();
        Summary { sorted: samples }
    }

    /// Every sample of `parts` in one summary.
    pub fn pooled<'a>(parts: impl IntoIterator<Item = &'a Summary>) -> Summary {
        Summary::of(
            parts
                .into_iter()
                .flat_map(|s| s.sorted.iter().copied())
                .collect(),
        )
    }

    pub fn count(&self) -> usize {
        self.sorted.len()
    }

    /// The q-quantile (0.0 ..= 1.0), nearest rank.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((self.sorted.len() as f64 * q).ceil() as usize).clamp(1, self.sorted.len());
        self.sorted[rank - 1]
    }

    pub fn ms(&self, q: f64) -> String {
        format!("{:.3}", self.quantile(q).as_secs_f64() * 1000.0)
    }
}
