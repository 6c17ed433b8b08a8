//! Performance counters of a launch: the GPU-speed evidence a simulator can give without a
//! GPU. Every counter is summed over all CTAs; the definitions:
//!
//! - **Shared-memory wavefronts** ([`SharedAccess`]), per warp-level request (one executed
//!   `ld.shared`/`st.shared`/`atom.shared`, generic access to shared memory, `cp.async`
//!   destination, or `ldmatrix`). Shared memory has 32 banks of 4 bytes; bank = (byte address
//!   / 4) mod 32. A request is split into *phases* as the hardware does: accesses of up to 4
//!   bytes per lane form one phase of 32 lanes; 8-byte accesses two phases (lanes 0–15,
//!   16–31); 16-byte accesses four (lanes 0–7, 8–15, 16–23, 24–31); `ldmatrix` one phase per
//!   8×8 matrix (the 8 row addresses of lanes 8j..8j+7, 16 bytes each). A phase with active
//!   lanes takes as many wavefronts as the largest number of *distinct* 4-byte words any one
//!   bank holds among its accesses (lanes reading the same word share it: a broadcast). The
//!   ideal is ⌈distinct words / 32⌉ per phase (1 for any phase of ≤ 128 bytes), and
//!   [`SharedAccess::bank_conflicts`] is wavefronts − ideal.
//! - **Global-memory sectors** ([`GlobalAccess`]), per warp-level request (`ld`/`st`/`atom`/
//!   `red` on global memory, generic accesses that resolve to it, `cp.async` sources): the
//!   distinct 32-byte sectors (address / 32) the active lanes touch, against the ideal
//!   ⌈distinct bytes requested / 32⌉. [`GlobalAccess::efficiency`] is ideal / sectors (1.0 when
//!   perfectly coalesced).
//! - **Branches**: warp-level `bra` instructions executed; **divergent branches**: those whose
//!   guard predicate is true for some but not all of the lanes executing it.
//! - **Barrier stall steps**: at each CTA-wide `bar.sync` release, for every warp waiting at
//!   it, (the largest number of warp instructions any waiting warp executed since the previous
//!   release) − (the number this warp executed). It is the warp-steps a warp would idle at the
//!   barrier if every warp issued one instruction per step: the work imbalance between
//!   barriers.
//! - **Instruction mix** ([`InstMix`]): warp instructions by class (one per warp step that
//!   executed the instruction, whatever its active lanes).

/// Shared-memory requests of one kind and their wavefronts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedAccess {
    /// Warp-level requests.
    pub requests: u64,
    /// Wavefronts they took (one per conflict-free pass over the 32 banks).
    pub wavefronts: u64,
    /// Wavefronts they would take without bank conflicts.
    pub ideal_wavefronts: u64,
}

impl SharedAccess {
    /// Extra wavefronts beyond the ideal: the bank conflicts.
    pub fn bank_conflicts(&self) -> u64 {
        self.wavefronts - self.ideal_wavefronts
    }

    fn add(&mut self, o: &SharedAccess) {
        self.requests += o.requests;
        self.wavefronts += o.wavefronts;
        self.ideal_wavefronts += o.ideal_wavefronts;
    }
}

/// Global-memory requests of one kind and their 32-byte sectors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalAccess {
    /// Warp-level requests.
    pub requests: u64,
    /// 32-byte sectors they touched.
    pub sectors: u64,
    /// Sectors the requested bytes need at the least (perfectly coalesced).
    pub ideal_sectors: u64,
}

impl GlobalAccess {
    /// Ideal sectors / sectors touched (1.0 when no request was made).
    pub fn efficiency(&self) -> f64 {
        if self.sectors == 0 {
            1.0
        } else {
            self.ideal_sectors as f64 / self.sectors as f64
        }
    }

    /// Sectors per request.
    pub fn sectors_per_request(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.sectors as f64 / self.requests as f64
        }
    }

    fn add(&mut self, o: &GlobalAccess) {
        self.requests += o.requests;
        self.sectors += o.sectors;
        self.ideal_sectors += o.ideal_sectors;
    }
}

/// Warp instructions executed, by class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstMix {
    /// `mma.sync`.
    pub mma: u64,
    /// `ldmatrix`.
    pub ldmatrix: u64,
    /// Loads and stores by the state space they accessed (generic ones by where the first
    /// active lane's address falls).
    pub global_loads: u64,
    /// Stores to global memory.
    pub global_stores: u64,
    /// Loads from shared memory.
    pub shared_loads: u64,
    /// Stores to shared memory.
    pub shared_stores: u64,
    /// Loads from `.local` memory.
    pub local_loads: u64,
    /// Stores to `.local` memory.
    pub local_stores: u64,
    /// Loads from the parameter space (`ld.param`).
    pub param_loads: u64,
    /// `atom`, `red`.
    pub atomics: u64,
    /// `cp.async` and its commit/wait.
    pub async_copies: u64,
    /// `shfl.sync`, `vote.sync`.
    pub collectives: u64,
    /// Integer and float arithmetic, logic, comparisons, moves, conversions.
    pub alu: u64,
    /// The special-function unit: `ex2`, `lg2`, `sin`, `cos`, `tanh`, `rsqrt`, and the
    /// `.approx` / `.full` forms of `rcp`, `sqrt`, `div`.
    pub sfu: u64,
    /// `bra`, `ret`/`exit`, `bar.sync`, `membar`/`fence`.
    pub control: u64,
}

impl InstMix {
    /// All warp instructions counted.
    pub fn total(&self) -> u64 {
        self.mma
            + self.ldmatrix
            + self.global_loads
            + self.global_stores
            + self.shared_loads
            + self.shared_stores
            + self.local_loads
            + self.local_stores
            + self.param_loads
            + self.atomics
            + self.async_copies
            + self.collectives
            + self.alu
            + self.sfu
            + self.control
    }

    fn add(&mut self, o: &InstMix) {
        self.mma += o.mma;
        self.ldmatrix += o.ldmatrix;
        self.global_loads += o.global_loads;
        self.global_stores += o.global_stores;
        self.shared_loads += o.shared_loads;
        self.shared_stores += o.shared_stores;
        self.local_loads += o.local_loads;
        self.local_stores += o.local_stores;
        self.param_loads += o.param_loads;
        self.atomics += o.atomics;
        self.async_copies += o.async_copies;
        self.collectives += o.collectives;
        self.alu += o.alu;
        self.sfu += o.sfu;
        self.control += o.control;
    }
}

/// The performance counters of a launch, summed over all CTAs: shared-memory wavefronts
/// ([`SharedAccess`]), global-memory sectors ([`GlobalAccess`]), branches, barrier stalls and
/// the instruction mix ([`InstMix`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// `ld.shared` and generic loads from shared memory.
    pub shared_loads: SharedAccess,
    /// `st.shared`, `atom`/`red` on shared memory, generic stores to it, `cp.async`
    /// destinations.
    pub shared_stores: SharedAccess,
    /// `ldmatrix` reads of shared memory.
    pub ldmatrix: SharedAccess,
    /// `ld.global` (incl. `.nc`), generic loads from global memory, `cp.async` sources.
    pub global_loads: GlobalAccess,
    /// `st.global`, `atom`/`red` on global memory, generic stores to it.
    pub global_stores: GlobalAccess,
    /// Warp-level conditional branches executed.
    pub branches: u64,
    /// Those whose active lanes did not all go the same way.
    pub divergent_branches: u64,
    /// Warp steps spent waiting at barriers (see the module docs).
    pub barrier_stall_steps: u64,
    /// Warp instructions by class.
    pub mix: InstMix,
}

impl Counters {
    pub(crate) fn add(&mut self, o: &Counters) {
        self.shared_loads.add(&o.shared_loads);
        self.shared_stores.add(&o.shared_stores);
        self.ldmatrix.add(&o.ldmatrix);
        self.global_loads.add(&o.global_loads);
        self.global_stores.add(&o.global_stores);
        self.branches += o.branches;
        self.divergent_branches += o.divergent_branches;
        self.barrier_stall_steps += o.barrier_stall_steps;
        self.mix.add(&o.mix);
    }
}

/// One lane's access of a warp request.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Access {
    pub lane: u8,
    pub addr: u64,
    pub bytes: u8,
}

/// The phase of `lane` for accesses of `bytes` bytes per lane.
fn phase(lane: u8, bytes: u8) -> u8 {
    match bytes {
        0..=4 => 0,
        5..=8 => lane / 16,
        _ => lane / 8,
    }
}

/// Wavefronts and ideal wavefronts of one shared-memory request; `phase_of` gives each
/// access's phase (see the module docs).
fn wavefronts(acc: &[Access], phase_of: impl Fn(&Access) -> u8) -> (u64, u64) {
    let (mut waves, mut ideal) = (0u64, 0u64);
    let mut words = [0u64; 128];
    for p in 0..4u8 {
        let mut n = 0;
        for a in acc.iter().filter(|a| phase_of(a) == p) {
            let (w0, w1) = (a.addr / 4, (a.addr + a.bytes.max(1) as u64 - 1) / 4);
            for w in w0..=w1 {
                if n < words.len() {
                    words[n] = w;
                    n += 1;
                }
            }
        }
        if n == 0 {
            continue;
        }
        let ws = &mut words[..n];
        ws.sort_unstable();
        let mut per_bank = [0u8; 32];
        let mut distinct = 0u64;
        let mut prev = u64::MAX;
        for &w in ws.iter() {
            if w != prev {
                per_bank[(w % 32) as usize] += 1;
                distinct += 1;
                prev = w;
            }
        }
        waves += *per_bank.iter().max().unwrap_or(&0) as u64;
        ideal += distinct.div_ceil(32);
    }
    (waves, ideal)
}

/// Records a shared-memory request of plain accesses (`ld`/`st`/`atom`/`cp.async`).
pub(crate) fn shared_request(c: &mut SharedAccess, acc: &[Access]) {
    if acc.is_empty() {
        return;
    }
    let (w, i) = wavefronts(acc, |a| phase(a.lane, a.bytes));
    c.requests += 1;
    c.wavefronts += w;
    c.ideal_wavefronts += i;
}

/// Records an `ldmatrix` request: `rows` are the row addresses of lanes `8j..8j+7` (matrix
/// `j`), one phase per matrix.
pub(crate) fn ldmatrix_request(c: &mut SharedAccess, rows: &[Access]) {
    if rows.is_empty() {
        return;
    }
    let (w, i) = wavefronts(rows, |a| a.lane / 8);
    c.requests += 1;
    c.wavefronts += w;
    c.ideal_wavefronts += i;
}

/// Records a global-memory request.
pub(crate) fn global_request(c: &mut GlobalAccess, acc: &[Access]) {
    if acc.is_empty() {
        return;
    }
    let mut sectors = [0u64; 64];
    let mut n = 0;
    let mut ranges = [(0u64, 0u64); 32];
    for (k, a) in acc.iter().enumerate() {
        let end = a.addr + a.bytes.max(1) as u64;
        for s in a.addr / 32..=(end - 1) / 32 {
            if n < sectors.len() {
                sectors[n] = s;
                n += 1;
            }
        }
        if k < ranges.len() {
            ranges[k] = (a.addr, end);
        }
    }
    let ss = &mut sectors[..n];
    ss.sort_unstable();
    let mut distinct = 0u64;
    let mut prev = u64::MAX;
    for &s in ss.iter() {
        if s != prev {
            distinct += 1;
            prev = s;
        }
    }
    let rs = &mut ranges[..acc.len().min(32)];
    rs.sort_unstable();
    let (mut bytes, mut cur) = (0u64, (0u64, 0u64));
    for &(s, e) in rs.iter() {
        if s >= cur.1 {
            bytes += cur.1 - cur.0;
            cur = (s, e);
        } else if e > cur.1 {
            cur.1 = e;
        }
    }
    bytes += cur.1 - cur.0;
    c.requests += 1;
    c.sectors += distinct;
    c.ideal_sectors += bytes.div_ceil(32);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(addrs: impl IntoIterator<Item = u64>, bytes: u8) -> Vec<Access> {
        addrs
            .into_iter()
            .enumerate()
            .map(|(l, addr)| Access {
                lane: l as u8,
                addr,
                bytes,
            })
            .collect()
    }

    fn shared(a: &[Access]) -> SharedAccess {
        let mut c = SharedAccess::default();
        shared_request(&mut c, a);
        c
    }

    #[test]
    fn bank_rules() {
        // 32 consecutive words: one wavefront
        assert_eq!(shared(&acc((0..32).map(|l| 4 * l), 4)).bank_conflicts(), 0);
        // stride 2 words: two lanes per bank -> 2 wavefronts
        let c = shared(&acc((0..32).map(|l| 8 * l), 4));
        assert_eq!((c.wavefronts, c.ideal_wavefronts), (2, 1));
        // stride 32 words: all 32 lanes in bank 0 -> 32 wavefronts
        assert_eq!(shared(&acc((0..32).map(|l| 128 * l), 4)).wavefronts, 32);
        // broadcast: every lane reads the same word
        assert_eq!(shared(&acc((0..32).map(|_| 64), 4)).wavefronts, 1);
        // 8-byte accesses, consecutive: two half-warp phases, conflict-free
        let c = shared(&acc((0..32).map(|l| 8 * l), 8));
        assert_eq!((c.wavefronts, c.ideal_wavefronts), (2, 2));
        // 16-byte accesses, consecutive: four quarter-warp phases
        let c = shared(&acc((0..32).map(|l| 16 * l), 16));
        assert_eq!((c.wavefronts, c.ideal_wavefronts), (4, 4));
        // 16-byte accesses with a 128-byte stride: 8 lanes of a phase in the same 4 banks
        let c = shared(&acc((0..32).map(|l| 128 * l), 16));
        assert_eq!((c.wavefronts, c.ideal_wavefronts), (32, 4));
    }

    #[test]
    fn sector_rules() {
        let g = |a: &[Access]| {
            let mut c = GlobalAccess::default();
            global_request(&mut c, a);
            (c.sectors, c.ideal_sectors)
        };
        // 32 lanes x 4 bytes, aligned: 4 sectors, ideal 4
        assert_eq!(g(&acc((0..32).map(|l| 4 * l), 4)), (4, 4));
        // misaligned by 4 bytes: 5 sectors
        assert_eq!(g(&acc((0..32).map(|l| 4 + 4 * l), 4)), (5, 4));
        // stride 128 bytes: 32 sectors for 128 bytes
        assert_eq!(g(&acc((0..32).map(|l| 128 * l), 4)), (32, 4));
        // broadcast
        assert_eq!(g(&acc((0..32).map(|_| 100), 4)), (1, 1));
    }
}
