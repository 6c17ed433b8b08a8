//! Schedule IR verifier: every rule broken is reported.

use super::Schedule;

/// Checks tile rank and sizes, warps, stages and vector width.
///
/// ```
/// let s = tessera_ir::schedule::parse("schedule matmul tile=[128, 96, 64] warps=3 stages=0 vector=4").unwrap();
/// let errs = tessera_ir::schedule::verify(&s).unwrap_err();
/// assert_eq!(errs.len(), 3);
/// assert!(errs[0].contains("tile[1] = 96"));
/// ```
pub fn verify(s: &Schedule) -> Result<(), Vec<String>> {
    let mut e = Vec::new();
    if s.tile.len() != s.class.tile_rank() {
        e.push(format!(
            "{} schedules have {} tile dims, got {}",
            s.class.name(),
            s.class.tile_rank(),
            s.tile.len()
        ));
    }
    for (i, t) in s.tile.iter().enumerate() {
        if !t.is_power_of_two() || *t > 1024 {
            e.push(format!("tile[{i}] = {t} must be a power of two ≤ 1024"));
        }
    }
    if !s.warps.is_power_of_two() || s.warps > 32 {
        e.push(format!("warps = {} must be a power of two ≤ 32", s.warps));
    }
    if !(1..=8).contains(&s.stages) {
        e.push(format!("stages = {} must be in 1..=8", s.stages));
    }
    if !s.vector.is_power_of_two() || s.vector > 16 {
        e.push(format!("vector = {} must be a power of two ≤ 16", s.vector));
    }
    if e.is_empty() { Ok(()) } else { Err(e) }
}
