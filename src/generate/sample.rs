//! Sampling exactly as ENGINE.md §8: temperature, top-k, top-p, min-p and a counter-based
//! SplitMix64 draw keyed by (seed, position), in f64 with the engine's own `exp64` and `seqsum`
//! (MODEL.md §5.3, §5.4), so a draw is a pure function of the fp32 logits, the settings and the
//! position: the same id on every ISA path, thread count, budget, batch and resume.
//!
//! Also the settings' validation (exit 2 naming the flag or key), the flag parsers, and the
//! seed from the operating system when none is given (§8 step 7).

use crate::constrain::Mask;
use crate::error::{Error, Result};
use k3_kernels::{argmax, exp64, seqsum};
use std::cmp::Ordering;

/// SplitMix64's increment (the golden-ratio constant), ENGINE.md §8 step 6.
pub const SPLITMIX_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// One sampling setting, for messages: its run flag (`--temperature`) and its JSON key
/// (`temperature`, in `--batch` lines and the report's `sampling` object).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// `--temperature T`: T ≥ 0 and finite; 0 is greedy.
    Temperature,
    /// `--top-k K`: an integer K ≥ 0; 0 is off.
    TopK,
    /// `--top-p P`: P in (0, 1]; 1 is off.
    TopP,
    /// `--min-p M`: M in [0, 1); 0 is off.
    MinP,
    /// `--seed S`: an integer in [−2⁶³, 2⁶⁴), negatives taken modulo 2⁶⁴.
    Seed,
}

impl Setting {
    /// Every setting, in the order of the report's `sampling` object.
    pub const ALL: [Setting; 5] = [
        Setting::Temperature,
        Setting::TopP,
        Setting::TopK,
        Setting::MinP,
        Setting::Seed,
    ];

    /// The run flag (`--temperature`, `--top-k`, `--top-p`, `--min-p`, `--seed`).
    pub fn flag(self) -> &'static str {
        match self {
            Setting::Temperature => "--temperature",
            Setting::TopK => "--top-k",
            Setting::TopP => "--top-p",
            Setting::MinP => "--min-p",
            Setting::Seed => "--seed",
        }
    }

    /// The JSON key (`temperature`, `top_k`, `top_p`, `min_p`, `seed`).
    pub fn key(self) -> &'static str {
        match self {
            Setting::Temperature => "temperature",
            Setting::TopK => "top_k",
            Setting::TopP => "top_p",
            Setting::MinP => "min_p",
            Setting::Seed => "seed",
        }
    }

    /// What a valid value is, as messages say it.
    pub fn expected(self) -> &'static str {
        match self {
            Setting::Temperature => "a finite number ≥ 0 (0 is greedy)",
            Setting::TopK => "an integer ≥ 0 (0 is off)",
            Setting::TopP => "a number in (0, 1] (1 is off)",
            Setting::MinP => "a number in [0, 1) (0 is off)",
            Setting::Seed => "an integer in [-9223372036854775808, 18446744073709551615]",
        }
    }

    /// Checks a float setting's range (§8 "Invalid settings"); NaN is always out of range.
    /// `TopK` and `Seed` are integers and always pass here.
    pub fn f64_in_range(self, v: f64) -> bool {
        match self {
            Setting::Temperature => v.is_finite() && v >= 0.0,
            Setting::TopP => v > 0.0 && v <= 1.0,
            Setting::MinP => (0.0..1.0).contains(&v),
            Setting::TopK | Setting::Seed => true,
        }
    }
}

/// Why a setting's text was refused, without the name of its source (a flag, a key).
fn refusal(s: Setting, found: &str) -> String {
    format!("expected {}, found `{found}`", s.expected())
}

/// Parses a float setting's text (`--temperature`, `--top-p`, `--min-p`) and checks its range.
/// Errors: the reason (the caller adds the flag or key, as [`parse_flag`] does).
pub fn parse_f64_setting(s: Setting, text: &str) -> std::result::Result<f64, String> {
    let t = text.trim();
    // Rust's parser also takes `inf`/`nan` spellings: they parse, and the range check refuses.
    match t.parse::<f64>() {
        Ok(v) if s.f64_in_range(v) => Ok(v),
        _ => Err(refusal(s, text)),
    }
}

/// Parses `--top-k` text: a decimal integer ≥ 0 (any size: K beyond V keeps every id).
pub fn parse_top_k(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    match t.parse::<u64>() {
        Ok(k) => Ok(k),
        // Digits that overflow u64 are still a valid "keep everything".
        Err(_) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => Ok(u64::MAX),
        Err(_) => Err(refusal(Setting::TopK, text)),
    }
}

/// Parses a seed: a decimal integer in [−2⁶³, 2⁶⁴); a negative one is taken modulo 2⁶⁴
/// (ENGINE.md §8: OpenAI clients send signed 64-bit seeds).
pub fn parse_seed(text: &str) -> std::result::Result<u64, String> {
    match text.trim().parse::<i128>() {
        Ok(v) if (i64::MIN as i128..=u64::MAX as i128).contains(&v) => Ok(v as u64),
        _ => Err(refusal(Setting::Seed, text)),
    }
}

/// Parses the text of a sampling flag into `settings`: `--temperature`, `--top-k`, `--top-p`,
/// `--min-p` or `--seed` (`s`), replacing the earlier value (a later flag overrides).
///
/// Errors (exit 2): `flag `--top-p 1.5`: expected a number in (0, 1] (1 is off), found `1.5``.
pub fn parse_flag(settings: &mut SamplerSettings, s: Setting, text: &str) -> Result<()> {
    let mut o = SamplerOverrides::default();
    o.set_flag(s, text)?;
    *settings = o.apply(settings).0;
    Ok(())
}

/// The sampler settings of ENGINE.md §8 (stored in the state file, FORMATS.md §9.2, and the
/// report's `sampling` object, §10).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerSettings {
    /// T ≥ 0, finite; 0 = greedy (the lowest id among the maxima).
    pub temperature: f64,
    /// K ≥ 0; 0 = off. Kept as given; `min(K, V)` is applied per draw.
    pub top_k: u64,
    /// P in (0, 1]; 1 = off.
    pub top_p: f64,
    /// M in [0, 1); 0 = off.
    pub min_p: f64,
    /// S, the 64-bit seed (a negative input already taken modulo 2⁶⁴).
    pub seed: u64,
}

impl SamplerSettings {
    /// Greedy decoding (`run`'s default): T = 0, every filter off, seed 0.
    pub fn greedy() -> SamplerSettings {
        SamplerSettings {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
        }
    }

    /// True when T = 0 (§8 step 1).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// The first setting out of range (§8 "Invalid settings"), if any, with its value as text.
    pub fn first_invalid(&self) -> Option<(Setting, String)> {
        [
            (Setting::Temperature, self.temperature),
            (Setting::TopP, self.top_p),
            (Setting::MinP, self.min_p),
        ]
        .into_iter()
        .find(|&(s, v)| !s.f64_in_range(v))
        .map(|(s, v)| (s, format!("{v:?}")))
    }

    /// Checks every range; `source` names where the values came from (a state file's path and
    /// field offset, a batch line), e.g. `run.state: sampler`.
    ///
    /// Errors (exit 2): `<source>: temperature: expected a finite number ≥ 0 …, found `-1.0``.
    pub fn validate(&self, source: &str) -> Result<()> {
        match self.first_invalid() {
            None => Ok(()),
            Some((s, v)) => Err(Error::invalid(format!(
                "{source}: {}: {}",
                s.key(),
                refusal(s, &v)
            ))),
        }
    }
}

/// Sampling settings a run gave explicitly (flags or a batch line's keys), applied over other
/// settings: `run`'s defaults, or a loaded state's stored ones (FORMATS.md §9.3: each setting
/// the run gives replaces the stored one, the others stay).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SamplerOverrides {
    /// `--temperature`, if given.
    pub temperature: Option<f64>,
    /// `--top-k`, if given.
    pub top_k: Option<u64>,
    /// `--top-p`, if given.
    pub top_p: Option<f64>,
    /// `--min-p`, if given.
    pub min_p: Option<f64>,
    /// `--seed`, if given (already modulo 2⁶⁴).
    pub seed: Option<u64>,
}

impl SamplerOverrides {
    /// Parses the text of flag `s` and records it (a later flag overrides an earlier one).
    ///
    /// Errors (exit 2): as [`parse_flag`], naming the flag.
    pub fn set_flag(&mut self, s: Setting, text: &str) -> Result<()> {
        let named = |why: String| Error::invalid(format!("flag `{} {text}`: {why}", s.flag()));
        match s {
            Setting::Temperature => {
                self.temperature = Some(parse_f64_setting(s, text).map_err(named)?)
            }
            Setting::TopP => self.top_p = Some(parse_f64_setting(s, text).map_err(named)?),
            Setting::MinP => self.min_p = Some(parse_f64_setting(s, text).map_err(named)?),
            Setting::TopK => self.top_k = Some(parse_top_k(text).map_err(named)?),
            Setting::Seed => self.seed = Some(parse_seed(text).map_err(named)?),
        }
        Ok(())
    }

    /// `base` with every given setting replaced, and the settings whose value changed (the
    /// report's `state.sampler_changed`), in [`Setting::ALL`] order.
    pub fn apply(&self, base: &SamplerSettings) -> (SamplerSettings, Vec<Setting>) {
        let mut out = *base;
        let mut changed = Vec::new();
        for s in Setting::ALL {
            let differs = match s {
                Setting::Temperature => replace_f64(&mut out.temperature, self.temperature),
                Setting::TopP => replace_f64(&mut out.top_p, self.top_p),
                Setting::MinP => replace_f64(&mut out.min_p, self.min_p),
                Setting::TopK => replace(&mut out.top_k, self.top_k),
                Setting::Seed => replace(&mut out.seed, self.seed),
            };
            if differs {
                changed.push(s);
            }
        }
        (out, changed)
    }
}

/// Sets `*slot` to `v` when given; true when the bits changed.
fn replace_f64(slot: &mut f64, v: Option<f64>) -> bool {
    match v {
        Some(v) if v.to_bits() != slot.to_bits() => {
            *slot = v;
            true
        }
        _ => false,
    }
}

fn replace(slot: &mut u64, v: Option<u64>) -> bool {
    match v {
        Some(v) if v != *slot => {
            *slot = v;
            true
        }
        _ => false,
    }
}

/// The SplitMix64 output for position `n` under seed `seed` (ENGINE.md §8 step 6):
/// x = S + (n + 1)·γ, then the three xor-shift-multiply rounds, all mod 2⁶⁴.
pub fn splitmix64(seed: u64, n: u64) -> u64 {
    let mut x = seed.wrapping_add(n.wrapping_add(1).wrapping_mul(SPLITMIX_GAMMA));
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The uniform draw u in [0, 1) for position `n`: (x >> 11) × 2⁻⁵³ (exact in f64).
pub fn uniform(seed: u64, n: u64) -> f64 {
    (splitmix64(seed, n) >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
}

/// A seed from the operating system's random source (§8 step 7): 8 bytes of `/dev/urandom`.
///
/// Errors (exit 4): `/dev/urandom` cannot be read, naming it.
pub fn os_seed() -> Result<u64> {
    use std::io::Read as _;
    const PATH: &str = "/dev/urandom";
    let mut b = [0u8; 8];
    std::fs::File::open(PATH)
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| {
            Error::io(format!(
                "{PATH}: cannot read a random seed: {e}; give one with --seed"
            ))
        })?;
    Ok(u64::from_le_bytes(b))
}

/// Candidate order of §8 step 2: logit descending (as numbers: −0 equals +0), ties by id
/// ascending. A total order on finite logits, so a partial selection and a full sort agree.
#[inline]
fn candidate_order(z: &[f32], a: u32, b: u32) -> Ordering {
    let (za, zb) = (z[a as usize], z[b as usize]);
    match zb.partial_cmp(&za) {
        Some(Ordering::Equal) | None => a.cmp(&b),
        Some(o) => o,
    }
}

/// A sampler with reusable scratch (V candidate ids and their weights), so a step allocates
/// nothing after the first. One per sequence, or shared by sequences of one thread.
#[derive(Debug, Default, Clone)]
pub struct Sampler {
    cand: Vec<u32>,
    w: Vec<f64>,
    kept: Vec<usize>,
}

impl Sampler {
    /// An empty sampler (scratch grows to V on first use).
    pub fn new() -> Sampler {
        Sampler::default()
    }

    /// Chooses the id at position `n` (the number of ids before it, prompt included) from the
    /// step's logits `z` (length V) under `s` (ENGINE.md §8, every step in its order).
    ///
    /// Returns `None` for empty logits or any non-finite logit (the engine refuses those
    /// before choosing, MODEL.md §5.6; greedy, like `argmax`, accepts ±inf). Settings are
    /// assumed valid ([`SamplerSettings::validate`]).
    pub fn choose(&mut self, z: &[f32], s: &SamplerSettings, n: u64) -> Option<u32> {
        self.choose_masked(z, s, n, None)
    }

    /// [`Sampler::choose`] under a constraint's mask (ENGINE.md §8 "Constraints"): the ids
    /// `mask` does not admit leave the candidate list before step 1, so greedy is the lowest
    /// id among the maxima of the admitted ids and the draw runs over the admitted ones in
    /// candidate order. The logits themselves are not changed (every one must still be
    /// finite to sample). `None` also when the mask admits nothing.
    pub fn choose_masked(
        &mut self,
        z: &[f32],
        s: &SamplerSettings,
        n: u64,
        mask: Option<&Mask>,
    ) -> Option<u32> {
        if s.is_greedy() {
            return match mask {
                None => argmax(z).map(|i| i as u32),
                Some(m) => masked_argmax(z, m),
            };
        }
        if z.is_empty() || z.iter().any(|v| !v.is_finite()) || z.len() > u32::MAX as usize {
            return None;
        }
        match mask {
            None => self.candidates(z, s.top_k),
            Some(m) => {
                self.masked_candidates(z, s.top_k, m);
                if self.cand.is_empty() {
                    return None;
                }
            }
        }
        self.weights(z, s.temperature);
        self.filter(s.top_p, s.min_p);
        Some(self.draw(uniform(s.seed, n)))
    }

    /// Steps 2–3: `cand` = the first min(K, V) ids in candidate order (all V when K = 0),
    /// by a partial selection when K < V.
    fn candidates(&mut self, z: &[f32], top_k: u64) {
        let v = z.len();
        self.cand.clear();
        self.cand.extend(0..v as u32);
        let k = if top_k == 0 {
            v
        } else {
            top_k.min(v as u64) as usize
        };
        let ord = |a: &u32, b: &u32| candidate_order(z, *a, *b);
        if k < v {
            self.cand.select_nth_unstable_by(k - 1, ord);
            self.cand.truncate(k);
        }
        self.cand.sort_unstable_by(ord);
    }

    /// Steps 2–3 over the admitted ids only: `cand` = the first min(K, admitted) of them in
    /// candidate order.
    fn masked_candidates(&mut self, z: &[f32], top_k: u64, m: &Mask) {
        self.cand.clear();
        self.cand
            .extend(m.iter().filter(|&id| (id as usize) < z.len()));
        let v = self.cand.len();
        let k = if top_k == 0 {
            v
        } else {
            top_k.min(v as u64) as usize
        };
        let ord = |a: &u32, b: &u32| candidate_order(z, *a, *b);
        if k < v && k > 0 {
            self.cand.select_nth_unstable_by(k - 1, ord);
            self.cand.truncate(k);
        }
        self.cand.sort_unstable_by(ord);
    }

    /// Step 4: w_i = exp64((f64(z_i) − f64(z_0)) / T).
    fn weights(&mut self, z: &[f32], t: f64) {
        let z0 = z[self.cand[0] as usize] as f64;
        self.w.clear();
        self.w.extend(
            self.cand
                .iter()
                .map(|&i| exp64((z[i as usize] as f64 - z0) / t)),
        );
    }

    /// Step 5: `kept` = indices into `cand` after top-p (the shortest prefix reaching P × W)
    /// and min-p (every kept w_i ≥ M; w_0 = 1 always stays).
    fn filter(&mut self, p: f64, m: f64) {
        let mut len = self.w.len();
        if p < 1.0 {
            let t = p * seqsum(self.w.iter().copied());
            let mut run = 0.0f64;
            for (j, &w) in self.w.iter().enumerate() {
                run += w;
                if run >= t {
                    len = j + 1;
                    break;
                }
            }
        }
        self.kept.clear();
        let w = &self.w;
        self.kept
            .extend((0..len).filter(|&i| !(m > 0.0 && w[i] < m)));
    }

    /// Step 6: r = u × W'; the first kept candidate whose running sum exceeds r (the last kept
    /// one if rounding leaves none).
    fn draw(&self, u: f64) -> u32 {
        let w = &self.w;
        let r = u * seqsum(self.kept.iter().map(|&i| w[i]));
        let mut run = 0.0f64;
        for &i in &self.kept {
            run += w[i];
            if run > r {
                return self.cand[i];
            }
        }
        // `kept` always holds candidate 0 (w_0 = 1 ≥ every M < 1, and top-p keeps ≥ 1).
        self.cand[*self.kept.last().unwrap_or(&0)]
    }
}

/// Greedy under a mask: the lowest id among the maxima of the admitted ids (logits compare
/// as numbers, −0 equals +0). `None` when nothing is admitted or an admitted logit is NaN.
pub fn masked_argmax(z: &[f32], m: &Mask) -> Option<u32> {
    let mut best: Option<(u32, f32)> = None;
    for id in m.iter() {
        let x = *z.get(id as usize)?;
        if x.is_nan() {
            return None;
        }
        match best {
            Some((_, b)) if x <= b => {}
            _ => best = Some((id, x)),
        }
    }
    best.map(|(id, _)| id)
}

/// One draw without reusable scratch ([`Sampler::choose`]).
pub fn sample(z: &[f32], s: &SamplerSettings, n: u64) -> Option<u32> {
    Sampler::new().choose(z, s, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(t: f64, k: u64, p: f64, m: f64, seed: u64) -> SamplerSettings {
        SamplerSettings {
            temperature: t,
            top_k: k,
            top_p: p,
            min_p: m,
            seed,
        }
    }

    /// The seed whose draw at position `n` gives exactly `u` would be hard to find; instead
    /// the hand-worked cases pick (seed, n) and compute u here, then reason with it.
    #[test]
    fn splitmix_reference_values() {
        // SplitMix64 with state 0: the published first outputs of the generator whose state
        // advances by γ are 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F.
        assert_eq!(splitmix64(0, 0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0, 1), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(splitmix64(0, 2), 0x06C4_5D18_8009_454F);
        // Keyed by seed + position: (S, n) and (S + γ, n − 1) are the same draw.
        assert_eq!(splitmix64(SPLITMIX_GAMMA, 1), splitmix64(0, 2));
        let u = uniform(0, 0);
        assert_eq!(u, (0xE220_A839_7B1D_CDAFu64 >> 11) as f64 / 2f64.powi(53));
        assert!((0.0..1.0).contains(&u));
    }

    #[test]
    fn greedy_is_lowest_id_among_maxima() {
        let g = SamplerSettings::greedy();
        assert_eq!(sample(&[1.0, 3.0, 3.0, 2.0], &g, 0), Some(1));
        assert_eq!(sample(&[-0.0, 0.0], &g, 5), Some(0));
        assert_eq!(sample(&[0.0, -0.0], &g, 5), Some(0));
        assert_eq!(sample(&[f32::NAN, 1.0], &g, 0), None);
        assert_eq!(sample(&[], &g, 0), None);
    }

    fn mask_of(v: usize, ids: &[u32]) -> Mask {
        let mut m = Mask::new(v);
        for &id in ids {
            m.set(id);
        }
        m
    }

    #[test]
    fn masked_greedy_is_lowest_admitted_id_among_admitted_maxima() {
        let g = SamplerSettings::greedy();
        let z = [1.0f32, 3.0, 3.0, 2.0, 2.0];
        let mut sm = Sampler::new();
        assert_eq!(
            sm.choose_masked(&z, &g, 0, Some(&mask_of(5, &[2, 3]))),
            Some(2)
        );
        assert_eq!(
            sm.choose_masked(&z, &g, 0, Some(&mask_of(5, &[0, 4, 3]))),
            Some(3)
        );
        assert_eq!(
            sm.choose_masked(&z, &g, 0, Some(&mask_of(5, &[0]))),
            Some(0)
        );
        assert_eq!(sm.choose_masked(&z, &g, 0, Some(&mask_of(5, &[]))), None);
        assert_eq!(
            sm.choose_masked(&[0.0, -0.0], &g, 0, Some(&mask_of(2, &[0, 1]))),
            Some(0)
        );
        assert_eq!(
            sm.choose_masked(&[-0.0, 0.0], &g, 0, Some(&mask_of(2, &[1, 0]))),
            Some(0)
        );
    }

    /// A mask that admits every id draws what the unmasked sampler draws; a mask draws only
    /// admitted ids, and the same as the sampler over the admitted logits alone.
    #[test]
    fn masked_draws_match_the_sampler_over_the_admitted_ids() {
        let z: Vec<f32> = (0..40)
            .map(|i| ((i * 17) % 13) as f32 * 0.3 - 1.0)
            .collect();
        let all = mask_of(40, &(0..40).collect::<Vec<_>>());
        let some: Vec<u32> = (0..40).filter(|i| i % 3 != 1).collect();
        let sub = mask_of(40, &some);
        let zs: Vec<f32> = some.iter().map(|&i| z[i as usize]).collect();
        let mut sm = Sampler::new();
        for (n, s) in [
            st(0.8, 0, 0.9, 0.0, 3),
            st(1.3, 5, 1.0, 0.05, 9),
            st(0.5, 0, 1.0, 0.0, 1),
        ]
        .iter()
        .enumerate()
        .flat_map(|(j, s)| (0..30u64).map(move |n| (n + 100 * j as u64, *s)))
        {
            assert_eq!(sm.choose_masked(&z, &s, n, Some(&all)), sample(&z, &s, n));
            let got = sm.choose_masked(&z, &s, n, Some(&sub)).unwrap();
            // over the admitted logits alone the same draw picks the same rank, so the same
            // id once mapped back (the candidate order within them is unchanged)
            let alone = sample(&zs, &s, n).unwrap();
            assert_eq!(got, some[alone as usize], "n = {n}");
        }
    }

    #[test]
    fn top_k_one_is_greedy_whatever_the_draw() {
        let z = [0.5f32, 2.0, -1.0, 2.0, 1.9];
        for seed in 0..50 {
            assert_eq!(sample(&z, &st(1.0, 1, 1.0, 0.0, seed), seed * 7), Some(1));
        }
    }

    #[test]
    fn hand_worked_two_candidates() {
        // z = [0, ln-ish]: with T = 1, w = [1, exp64(-1)] (candidate order: id 1 first).
        let z = [-1.0f32, 0.0];
        let s = st(1.0, 0, 1.0, 0.0, 0);
        let w1 = exp64(-1.0);
        let wsum = 1.0 + w1;
        for n in 0..64 {
            let r = uniform(0, n) * wsum;
            let want = if 1.0 > r { 1 } else { 0 };
            assert_eq!(sample(&z, &s, n), Some(want), "n = {n}");
        }
        // top-p 0.5: t = 0.5 × W < 1 = w_0, so only id 1 is kept.
        assert_eq!(sample(&z, &st(1.0, 0, 0.5, 0.0, 9), 3), Some(1));
        // min-p 0.5 drops w = e⁻¹ ≈ 0.37.
        assert_eq!(sample(&z, &st(1.0, 0, 1.0, 0.5, 9), 3), Some(1));
        // min-p 0.3 keeps it: both ids occur over positions.
        let ids: Vec<_> = (0..64)
            .map(|n| sample(&z, &st(1.0, 0, 1.0, 0.3, 1), n).unwrap())
            .collect();
        assert!(ids.contains(&0) && ids.contains(&1));
        // w_i == M exactly is kept (only w_i < M is dropped).
        let ids: Vec<_> = (0..64)
            .map(|n| sample(&z, &st(1.0, 0, 1.0, w1, 1), n).unwrap())
            .collect();
        assert!(ids.contains(&0) && ids.contains(&1));
        // top-p with t = P × W exactly reached by the first sum: P = 1/W' keeps one.
        let p = 1.0 / wsum;
        if p * wsum <= 1.0 {
            assert!((0..64).all(|n| sample(&z, &st(1.0, 0, p, 0.0, 2), n) == Some(1)));
        }
    }

    #[test]
    fn ties_and_signed_zero_order_by_id() {
        // All equal (with −0 and +0 mixed): uniform over ids, order by id; r = u × 4, so the
        // chosen index is floor(r) exactly (running sums 1, 2, 3, 4 are exact).
        let z = [0.0f32, -0.0, 0.0, -0.0];
        let s = st(0.7, 0, 1.0, 0.0, 42);
        for n in 0..100 {
            let want = (uniform(42, n) * 4.0) as u32;
            assert_eq!(sample(&z, &s, n), Some(want), "n = {n}");
        }
        // top-k 2 of four equal logits keeps ids 0 and 1.
        for n in 0..100 {
            assert!(sample(&z, &st(0.7, 2, 1.0, 0.0, 3), n).unwrap() < 2);
        }
    }

    #[test]
    fn tiny_temperature_is_greedy_and_huge_is_uniform() {
        let z = [1.0f32, 1.5, 1.25];
        for n in 0..50 {
            assert_eq!(sample(&z, &st(1e-300, 0, 1.0, 0.0, n), n), Some(1));
            assert_eq!(
                sample(&z, &st(f64::MIN_POSITIVE / 4.0, 0, 1.0, 0.0, n), n),
                Some(1)
            );
        }
        // T = 1e300: every w_i rounds to 1 (the differences vanish), order 1, 2, 0.
        for n in 0..50 {
            let want = [1, 2, 0][(uniform(5, n) * 3.0) as usize];
            assert_eq!(sample(&z, &st(1e300, 0, 1.0, 0.0, 5), n), Some(want));
        }
    }

    #[test]
    fn non_finite_logits_are_refused_when_sampling() {
        let s = st(1.0, 0, 1.0, 0.0, 0);
        assert_eq!(sample(&[1.0, f32::INFINITY], &s, 0), None);
        assert_eq!(sample(&[1.0, f32::NAN], &s, 0), None);
        assert_eq!(sample(&[], &s, 0), None);
    }

    #[test]
    fn partial_selection_equals_full_sort() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut sm = Sampler::new();
        for case in 0..300u64 {
            x = splitmix64(x, case);
            let v = 1 + (x % 300) as usize;
            // Few distinct values: many ties, both zeros.
            let z: Vec<f32> = (0..v)
                .map(|i| {
                    let h = splitmix64(x, i as u64);
                    match h % 5 {
                        0 => 0.0,
                        1 => -0.0,
                        _ => ((h >> 40) % 7) as f32 * 0.25 - 1.0,
                    }
                })
                .collect();
            let k = 1 + (x >> 20) % (v as u64 + 3);
            sm.candidates(&z, k);
            let mut all: Vec<u32> = (0..v as u32).collect();
            all.sort_by(|a, b| candidate_order(&z, *a, *b));
            all.truncate(k.min(v as u64) as usize);
            assert_eq!(sm.cand, all, "case {case}");
        }
    }

    #[test]
    fn flag_parsing_names_the_flag() {
        let mut s = SamplerSettings::greedy();
        parse_flag(&mut s, Setting::Temperature, "0.8").unwrap();
        parse_flag(&mut s, Setting::TopK, "40").unwrap();
        parse_flag(&mut s, Setting::TopP, "1").unwrap();
        parse_flag(&mut s, Setting::MinP, "0").unwrap();
        parse_flag(&mut s, Setting::Seed, "-1").unwrap();
        assert_eq!(s, st(0.8, 40, 1.0, 0.0, u64::MAX));
        parse_flag(&mut s, Setting::Seed, "18446744073709551615").unwrap();
        assert_eq!(s.seed, u64::MAX);
        parse_flag(&mut s, Setting::Seed, "-9223372036854775808").unwrap();
        assert_eq!(s.seed, 1 << 63);
        parse_flag(&mut s, Setting::TopK, "99999999999999999999999").unwrap();
        assert_eq!(s.top_k, u64::MAX);
        let bad = [
            (Setting::Temperature, "-0.1"),
            (Setting::Temperature, "inf"),
            (Setting::Temperature, "nan"),
            (Setting::Temperature, "warm"),
            (Setting::Temperature, ""),
            (Setting::TopK, "-1"),
            (Setting::TopK, "1.5"),
            (Setting::TopK, "x"),
            (Setting::TopP, "0"),
            (Setting::TopP, "1.0000001"),
            (Setting::TopP, "nan"),
            (Setting::MinP, "1"),
            (Setting::MinP, "-0.01"),
            (Setting::MinP, "NaN"),
            (Setting::Seed, "18446744073709551616"),
            (Setting::Seed, "-9223372036854775809"),
            (Setting::Seed, "1.0"),
            (Setting::Seed, "abc"),
        ];
        for (set, text) in bad {
            let before = s;
            let e = parse_flag(&mut s, set, text).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(
                e.message
                    .starts_with(&format!("flag `{} {text}`: expected ", set.flag())),
                "{}",
                e.message
            );
            assert_eq!(s, before, "a refused flag changes nothing");
        }
    }

    #[test]
    fn validation_names_the_key() {
        assert!(SamplerSettings::greedy().validate("x").is_ok());
        let e = st(f64::INFINITY, 0, 1.0, 0.0, 0)
            .validate("s.state: sampler")
            .unwrap_err();
        assert!(
            e.message.starts_with("s.state: sampler: temperature: "),
            "{}",
            e.message
        );
        let e = st(1.0, 0, 0.0, 0.0, 0).validate("l").unwrap_err();
        assert!(e.message.starts_with("l: top_p: "), "{}", e.message);
        let e = st(1.0, 0, 1.0, 1.0, 0).validate("l").unwrap_err();
        assert!(e.message.starts_with("l: min_p: "), "{}", e.message);
    }

    #[test]
    fn os_seeds_differ() {
        // 2⁻⁶⁴ chance of a false failure.
        assert_ne!(os_seed().unwrap(), os_seed().unwrap());
    }

    #[test]
    fn overrides_replace_given_settings_and_list_changes() {
        let stored = st(0.7, 40, 0.9, 0.0, 11);
        let mut o = SamplerOverrides::default();
        assert_eq!(o.apply(&stored), (stored, vec![]));
        o.set_flag(Setting::TopK, "40").unwrap(); // same value: not a change
        o.set_flag(Setting::MinP, "0.1").unwrap();
        o.set_flag(Setting::Seed, "12").unwrap();
        o.set_flag(Setting::Seed, "-2").unwrap(); // a later flag overrides
        let (s, changed) = o.apply(&stored);
        assert_eq!(s, st(0.7, 40, 0.9, 0.1, u64::MAX - 1));
        assert_eq!(changed, vec![Setting::MinP, Setting::Seed]);
        assert!(o.set_flag(Setting::TopP, "2").is_err());
        assert_eq!(o.top_p, None);
    }
}
