//! A histogram of durations in fixed, log-spaced buckets: its memory does
//! not depend on what it counts, a value costs a few instructions, and a
//! percentile read back is within a known fraction of the true one.

/// Values above this (about 51 days in microseconds) count in the last
/// bucket; `max` stays exact.
const TOP_BIT: u32 = 42;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    /// Each power of two is split into `2^sub_bits` buckets: a bucket spans
    /// 1/2^sub_bits of its lower bound, so its middle is within
    /// 1/2^(sub_bits+1) of any value in it.
    sub_bits: u32,
    counts: Box<[u64]>,
    count: u64,
    sum: u64,
    max: u64,
}

/// What a histogram says, read once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    pub count: u64,
    pub sum: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

impl Histogram {
    /// A histogram whose percentiles are within 1/2^(sub_bits+1) of the
    /// true values (`sub_bits` at most 6).
    pub fn new(sub_bits: u32) -> Self {
        let sub_bits = sub_bits.min(6);
        let buckets = (TOP_BIT - sub_bits + 1) << sub_bits;
        Histogram {
            sub_bits,
            counts: vec![0; buckets as usize].into_boxed_slice(),
            count: 0,
            sum: 0,
            max: 0,
        }
    }

    fn index(&self, v: u64) -> usize {
        let s = self.sub_bits;
        let v = v.min((1u64 << TOP_BIT) - 1);
        if v < 1 << s {
            return v as usize;
        }
        let msb = 63 - v.leading_zeros();
        let group = msb - s + 1;
        let mantissa = (v >> (msb - s)) & ((1 << s) - 1);
        ((group << s) as u64 + mantissa) as usize
    }

    /// The lower bound and width of bucket `i`.
    fn bounds(&self, i: usize) -> (u64, u64) {
        let s = self.sub_bits;
        let i = i as u64;
        let group = i >> s;
        if group == 0 {
            return (i, 1);
        }
        let mantissa = i & ((1 << s) - 1);
        let width = 1u64 << (group - 1);
        (((1 << s) + mantissa) * width, width)
    }

    pub fn record(&mut self, v: u64) {
        let i = self.index(v);
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.count += 1;
        self.sum = self.sum.saturating_add(v);
        self.max = self.max.max(v);
    }

    /// Adds `other`'s counts (same `sub_bits`, else nothing happens).
    pub fn merge(&mut self, other: &Histogram) {
        if other.sub_bits != self.sub_bits {
            return;
        }
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The value below which a fraction `q` of the values lie: the middle
    /// of the bucket holding the value of rank ceil(q * count), never above
    /// `max`; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, width) = self.bounds(i);
                return (low + width / 2).min(self.max);
            }
        }
        self.max
    }

    pub fn summary(&self) -> Summary {
        Summary {
            count: self.count,
            sum: self.sum,
            p50: self.quantile(0.5),
            p90: self.quantile(0.9),
            p99: self.quantile(0.99),
            max: self.max,
        }
    }

    /// Bytes it occupies.
    pub fn memory(&self) -> usize {
        std::mem::size_of::<Self>() + std::mem::size_of_val(&*self.counts)
    }
}
