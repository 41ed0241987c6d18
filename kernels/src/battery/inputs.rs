//! The battery's inputs: branch points, adversarial pairs, value kinds and a deterministic
//! generator (SplitMix64).

/// Round-to-nearest-even fp32 → BF16 for building BF16 test weights, saturating at the
/// largest finite BF16 so that no weight is infinite (test data only; the engine never
/// narrows).
pub(super) fn bf16_of(v: f32) -> u16 {
    let b = v.to_bits();
    let round = 0x7fff + ((b >> 16) & 1);
    let h = (b.wrapping_add(round) >> 16) as u16;
    if h & 0x7fff >= 0x7f80 {
        (h & 0x8000) | 0x7f7f
    } else {
        h
    }
}

/// Inputs at every branch boundary of exp64/tanh64/sig64 and special values.
pub(super) fn branch_points() -> Vec<f64> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        -f64::MAX,
        f64::MIN_POSITIVE,
        -f64::MIN_POSITIVE,
        5e-324,
        -5e-324,
        f32::MAX as f64,
        1.0e-45,
        0.5,
        -0.5,
        88.72,
        -103.97,
        17.33,
    ];
    for c in [
        709.0f64,
        -708.0,
        1.0 / 8192.0,
        -1.0 / 8192.0,
        20.0,
        -20.0,
        0.34657359,
        744.5,
        -745.2,
    ] {
        let b = c.to_bits();
        for d in [c, f64::from_bits(b - 1), f64::from_bits(b + 1)] {
            v.push(d);
        }
    }
    // Where kk = floor(x·log2e + 0.5) changes: x = (k − 0.5)·ln 2, and its neighbours.
    for k in [-1021i32, -500, -1, 0, 1, 2, 700, 1023] {
        let c = (k as f64 - 0.5) * std::f64::consts::LN_2;
        let b = c.to_bits();
        v.extend([c, f64::from_bits(b - 1), f64::from_bits(b + 1)]);
    }
    v
}

/// Dot inputs that break a wrong accumulation order or an FMA.
pub(super) fn adversarial_pairs() -> Vec<(Vec<f32>, Vec<f32>)> {
    let mut v = Vec::new();
    // Exact cancellation across lanes: big, tiny, −big in different lanes.
    let mut a = vec![0.0f32; 37];
    let b = vec![1.0f32; 37];
    a[0] = 1.0e30;
    a[5] = 1.0;
    a[16] = -1.0e30;
    a[33] = 3.0e-39;
    v.push((a, b.clone()));
    // Huge exponent spread: 2^±126 and subnormals alternating.
    let a: Vec<f32> = (0..50)
        .map(|i| if i % 2 == 0 { 8.5e37 } else { 1.4e-45 })
        .collect();
    let bb: Vec<f32> = (0..50)
        .map(|i| if i % 3 == 0 { -1.1754942e-38 } else { 3.0e38 })
        .collect();
    v.push((a, bb));
    // All subnormal.
    let a: Vec<f32> = (0..33).map(|i| f32::from_bits(1 + i * 1000)).collect();
    v.push((a.clone(), a));
    // Signed zeros only: the result is +0.
    let a: Vec<f32> = (0..19)
        .map(|i| if i % 2 == 0 { -0.0 } else { 0.0 })
        .collect();
    v.push((a, b[..19].to_vec()));
    // x · x with values whose products need 48 bits (an FMA would round differently).
    let a: Vec<f32> = (0..40).map(|i| 1.0 + (i as f32) * 1.1920929e-7).collect();
    let c: Vec<f32> = a.iter().map(|x| -x).collect();
    let mut aa = a.clone();
    aa.extend(&a);
    let mut cc = a;
    cc.extend(&c);
    v.push((aa, cc));
    v
}

#[derive(Clone, Copy)]
pub(super) enum Kind {
    Normal,
    Mixed,
    Huge,
    Tiny,
    Cancel,
}

impl Kind {
    pub(super) const COUNT: usize = 5;
    pub(super) fn from(i: usize) -> Kind {
        [
            Kind::Normal,
            Kind::Mixed,
            Kind::Huge,
            Kind::Tiny,
            Kind::Cancel,
        ][i % Self::COUNT]
    }
}

/// SplitMix64 (deterministic on every platform).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in \[−1, 1).
    pub(super) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    pub(super) fn one(&mut self, kind: Kind) -> f32 {
        match kind {
            Kind::Normal => self.unit() as f32,
            Kind::Huge => (self.unit() * 3.0e38) as f32,
            Kind::Tiny => (self.unit() * 1.0e-38) as f32,
            Kind::Mixed | Kind::Cancel => match self.next() % 8 {
                0 => 0.0,
                1 => -0.0,
                2 => f32::from_bits((self.next() % 0x0080_0000) as u32), // subnormal
                3 => (self.unit() * 3.4e38) as f32,
                4 => f32::from_bits(
                    ((self.next() % 254 + 1) << 23) as u32 | (self.next() as u32 & 0x807f_ffff),
                ),
                _ => self.unit() as f32,
            },
        }
    }
    pub(super) fn vec(&mut self, n: usize, kind: Kind) -> Vec<f32> {
        let mut v: Vec<f32> = (0..n).map(|_| self.one(kind)).collect();
        if let Kind::Cancel = kind {
            // Second half negates the first: large partial sums that cancel exactly.
            for i in n / 2..n {
                v[i] = -v[i - n / 2];
            }
        }
        v
    }
    pub(super) fn pair(&mut self, n: usize, kind: Kind) -> (Vec<f32>, Vec<f32>) {
        let a = self.vec(n, kind);
        let b = match kind {
            Kind::Cancel => vec![1.0; n],
            _ => {
                let k = Kind::from(self.next() as usize);
                self.vec(n, k)
            }
        };
        (a, b)
    }
}
