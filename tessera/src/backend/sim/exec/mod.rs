//! Execution of one CTA: warps of 32 lanes in lockstep, scheduled one warp at a time.
//!
//! **Divergence: per-lane PCs with min-PC scheduling.** Each lane has its own PC; a warp step
//! executes the instruction at the smallest PC among its running lanes, for exactly the lanes
//! at that PC (then the guard predicate narrows them further). For the structured control flow
//! our emitters produce (forward `if` branches, backward loop branches) this is the classic
//! reconvergence order: lanes that skip ahead wait at the join point until the lanes behind
//! catch up, and a loop keeps its iterating lanes together while the finished ones wait at the
//! exit. It needs no reconvergence stack and no post-dominator analysis, and it is also correct
//! for unstructured branches (lanes just reconverge later). Warp-collective instructions
//! (`shfl.sync`, `vote.sync`, `ldmatrix`, `mma`) see exactly the lanes that execute them,
//! so a collective reached by a divergent subset is caught.
//!
//! **Barriers.** A lane reaching `bar.sync` waits; a warp runs until all its live lanes wait or
//! exited. When every warp is blocked, the CTA checks that all non-exited threads wait at the
//! same `bar.sync` (else: an error — on a GPU it would deadlock or be undefined) and releases
//! them into a new barrier epoch (the shared-memory race checker's unit of ordering).

pub(crate) mod alu;
mod mem;
mod warp;

use super::check::{Checks, Fault};
use super::ir::{Op, Opd, Program, Sreg};
use super::memory::{Global, Shared};
use std::collections::VecDeque;

/// Warp instructions one CTA may execute before it is reported as not terminating.
pub(crate) const FUEL: u64 = 200_000_000;

const RUN: u8 = 0;
const BAR: u8 = 1;
const EXIT: u8 = 2;

/// Everything CTAs of one launch share.
pub(crate) struct Launch<'a> {
    pub prog: &'a Program,
    pub global: Global<'a>,
    pub params: Vec<u8>,
    pub grid: [u32; 3],
    pub threads: u32,
    pub smem_bytes: usize,
    pub checks: Checks,
}

/// Counters of one CTA.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CtaStats {
    pub warp_insts: u64,
    pub lane_insts: u64,
    pub barriers: u64,
}

/// One in-flight `cp.async`.
pub(crate) struct AsyncCopy {
    pub dst: u64,
    pub data: [u8; 16],
    pub n: u8,
    pub line: u32,
}

/// A thread's cp.async state: copies not yet committed, then committed groups (oldest first).
#[derive(Default)]
pub(crate) struct AsyncState {
    pub open: Vec<AsyncCopy>,
    pub groups: VecDeque<Vec<AsyncCopy>>,
}

/// The registers of one warp and its coordinates: what lane-wise code reads and writes.
pub(crate) struct Lanes<'a> {
    /// `[reg][lane]`.
    pub regs: &'a mut [u64],
    pub warp: u32,
    pub ntid: u32,
    pub ctaid: [u32; 3],
    pub nctaid: [u32; 3],
}

impl Lanes<'_> {
    /// The lanes set in `mask`, in increasing order.
    pub(crate) fn iter(mask: u32) -> impl Iterator<Item = usize> {
        let mut m = mask;
        std::iter::from_fn(move || {
            if m == 0 {
                return None;
            }
            let l = m.trailing_zeros();
            m &= m - 1;
            Some(l as usize)
        })
    }

    #[inline]
    pub(crate) fn rd(&self, o: &Opd, lane: usize) -> u64 {
        match *o {
            Opd::Reg(r) => self.regs[r as usize * 32 + lane],
            Opd::Imm(v) => v,
            Opd::Not(r) => (self.regs[r as usize * 32 + lane] & 1 == 0) as u64,
            Opd::Sreg(s) => match s {
                Sreg::Tid(0) => (self.warp * 32) as u64 + lane as u64,
                Sreg::Tid(_) => 0,
                Sreg::Ntid(0) => self.ntid as u64,
                Sreg::Ntid(_) => 1,
                Sreg::Ctaid(i) => self.ctaid[i as usize] as u64,
                Sreg::Nctaid(i) => self.nctaid[i as usize] as u64,
                Sreg::LaneId => lane as u64,
                Sreg::WarpId => self.warp as u64,
            },
            _ => 0,
        }
    }

    #[inline]
    pub(crate) fn wr(&mut self, r: u32, lane: usize, v: u64) {
        self.regs[r as usize * 32 + lane] = v;
    }

    #[inline]
    fn put(&mut self, d: &Opd, lane: usize, v: u64) {
        if let Opd::Reg(r) = *d {
            self.wr(r, lane, v);
        }
    }

    pub(crate) fn map1(&mut self, a: &[Opd], mask: u32, f: impl Fn(u64) -> u64) {
        for lane in Self::iter(mask) {
            let v = f(self.rd(&a[1], lane));
            self.put(&a[0], lane, v);
        }
    }

    pub(crate) fn map2(&mut self, a: &[Opd], mask: u32, f: impl Fn(u64, u64) -> u64) {
        for lane in Self::iter(mask) {
            let v = f(self.rd(&a[1], lane), self.rd(&a[2], lane));
            self.put(&a[0], lane, v);
        }
    }

    pub(crate) fn map3(&mut self, a: &[Opd], mask: u32, f: impl Fn(u64, u64, u64) -> u64) {
        for lane in Self::iter(mask) {
            let v = f(
                self.rd(&a[1], lane),
                self.rd(&a[2], lane),
                self.rd(&a[3], lane),
            );
            self.put(&a[0], lane, v);
        }
    }

    /// `setp` (with optional combining predicate `a[3]`), to `p` or `p|q` (q gets the
    /// complement before combining, as PTX defines).
    pub(crate) fn setp(
        &mut self,
        a: &[Opd],
        mask: u32,
        f: impl Fn(u64, u64) -> bool,
        b: Option<super::ir::BoolOp>,
    ) {
        use super::ir::BoolOp;
        let comb = |r: bool, c: bool| match b {
            None => r,
            Some(BoolOp::And) => r && c,
            Some(BoolOp::Or) => r || c,
            Some(BoolOp::Xor) => r ^ c,
        };
        for lane in Self::iter(mask) {
            let r = f(self.rd(&a[1], lane), self.rd(&a[2], lane));
            let c = if b.is_some() {
                self.rd(&a[3], lane) & 1 != 0
            } else {
                false
            };
            match a[0] {
                Opd::Reg(p) => self.wr(p, lane, comb(r, c) as u64),
                Opd::Pair(p, q) => {
                    self.wr(p, lane, comb(r, c) as u64);
                    self.wr(q, lane, comb(!r, c) as u64);
                }
                _ => {}
            }
        }
    }
}

/// One CTA being simulated.
pub(crate) struct Cta<'a> {
    pub l: &'a Launch<'a>,
    pub ctaid: [u32; 3],
    pub regs: Vec<u64>,
    pub pc: Vec<u32>,
    pub st: Vec<u8>,
    pub smem: Shared,
    pub asyncs: Vec<AsyncState>,
    pub stats: CtaStats,
}

impl<'a> Cta<'a> {
    fn lanes(&mut self, w: u32) -> Lanes<'_> {
        let n = self.l.prog.nregs as usize * 32;
        Lanes {
            regs: &mut self.regs[w as usize * n..(w as usize + 1) * n],
            warp: w,
            ntid: self.l.threads,
            ctaid: self.ctaid,
            nctaid: self.l.grid,
        }
    }

    /// Address operand value for `lane` of warp `w`.
    pub(crate) fn addr(&self, w: u32, o: &Opd, lane: usize) -> u64 {
        let Opd::Mem(a) = o else { return u64::MAX };
        let b = match a.base {
            super::ir::Base::Reg(r) => {
                self.regs[(w as usize * self.l.prog.nregs as usize + r as usize) * 32 + lane]
            }
            super::ir::Base::Abs(x) => x,
            super::ir::Base::Param(p) => p as u64,
        };
        b.wrapping_add(a.off as u64)
    }

    /// Register value of operand `o` for `lane` of warp `w`.
    pub(crate) fn val(&self, w: u32, o: &Opd, lane: usize) -> u64 {
        let n = self.l.prog.nregs as usize;
        match *o {
            Opd::Reg(r) => self.regs[(w as usize * n + r as usize) * 32 + lane],
            Opd::Imm(v) => v,
            _ => 0,
        }
    }

    pub(crate) fn set(&mut self, w: u32, o: &Opd, lane: usize, v: u64) {
        let n = self.l.prog.nregs as usize;
        if let Opd::Reg(r) = *o {
            self.regs[(w as usize * n + r as usize) * 32 + lane] = v;
        }
    }

    fn run_warp(&mut self, w: u32) -> Result<(), Fault> {
        let base = w as usize * 32;
        let n = (self.l.threads as usize - base).min(32);
        let ninst = self.l.prog.insts.len() as u32;
        loop {
            let mut minpc = u32::MAX;
            let mut mask = 0u32;
            for lane in 0..n {
                if self.st[base + lane] == RUN {
                    let p = self.pc[base + lane];
                    if p < minpc {
                        minpc = p;
                        mask = 1 << lane;
                    } else if p == minpc {
                        mask |= 1 << lane;
                    }
                }
            }
            if mask == 0 {
                return Ok(());
            }
            if minpc >= ninst {
                for lane in Lanes::iter(mask) {
                    self.st[base + lane] = EXIT;
                }
                continue;
            }
            self.stats.warp_insts += 1;
            if self.stats.warp_insts > FUEL {
                let i = &self.l.prog.insts[minpc as usize];
                return Err(Fault::check(
                    i.line,
                    base as u32 + mask.trailing_zeros(),
                    None,
                    format!(
                        "the CTA executed {FUEL} warp instructions without finishing (infinite loop?)"
                    ),
                ));
            }
            self.step(w, minpc, mask)?;
        }
    }

    fn step(&mut self, w: u32, pc: u32, mask: u32) -> Result<(), Fault> {
        let l = self.l;
        let inst = &l.prog.insts[pc as usize];
        let base = w as usize * 32;
        let emask = match inst.guard {
            None => mask,
            Some((p, neg)) => {
                let n = l.prog.nregs as usize;
                let row = (w as usize * n + p as usize) * 32;
                let mut m = 0u32;
                for lane in Lanes::iter(mask) {
                    if (self.regs[row + lane] & 1 != 0) != neg {
                        m |= 1 << lane;
                    }
                }
                m
            }
        };
        self.stats.lane_insts += emask.count_ones() as u64;
        let first = base as u32 + mask.trailing_zeros();
        match &inst.op {
            Op::Alu { .. } | Op::Cvt { .. } | Op::CvtPack { .. } | Op::MovVec { .. } => {
                alu::exec(&inst.op, &inst.args, &mut self.lanes(w), emask).map_err(|m| {
                    Fault::unsupported(inst.line, first, format!("`{}`: {m}", inst.text))
                })?;
            }
            Op::Ld { .. }
            | Op::St { .. }
            | Op::Atom { .. }
            | Op::CpAsync { .. }
            | Op::CpCommit
            | Op::CpWait { .. }
            | Op::CpWaitAll => self.mem(w, inst, emask)?,
            Op::Shfl { .. } | Op::Vote { .. } | Op::Ldmatrix { .. } => {
                self.warp_op(w, inst, mask, emask)?
            }
            Op::Mma { ab } => {
                if emask != u32::MAX {
                    return Err(Fault::check(
                        inst.line,
                        first,
                        None,
                        format!(
                            "mma.sync executed by lanes {emask:#010x}: all 32 lanes of the warp must execute it"
                        ),
                    ));
                }
                super::mma::mma_m16n8k16(&mut self.lanes(w), &inst.args, *ab);
            }
            Op::Fence => {}
            Op::Bra { uni } => {
                if *uni && emask != 0 && emask != mask {
                    return Err(Fault::check(
                        inst.line,
                        first,
                        None,
                        format!(
                            "bra.uni with a divergent predicate: lanes {emask:#010x} of {mask:#010x} take it"
                        ),
                    ));
                }
                let Opd::Target(t) = inst.args[0] else {
                    unreachable!("decoded")
                };
                for lane in Lanes::iter(mask) {
                    self.pc[base + lane] = if emask & (1 << lane) != 0 { t } else { pc + 1 };
                }
                return Ok(());
            }
            Op::Exit => {
                for lane in Lanes::iter(mask) {
                    if emask & (1 << lane) != 0 {
                        self.st[base + lane] = EXIT;
                    } else {
                        self.pc[base + lane] = pc + 1;
                    }
                }
                return Ok(());
            }
            Op::Bar { .. } => {
                for lane in Lanes::iter(mask) {
                    if emask & (1 << lane) != 0 {
                        self.st[base + lane] = BAR;
                    } else {
                        self.pc[base + lane] = pc + 1;
                    }
                }
                return Ok(());
            }
        }
        for lane in Lanes::iter(mask) {
            self.pc[base + lane] = pc + 1;
        }
        Ok(())
    }
}

/// Runs CTA `ctaid` to completion.
pub(crate) fn run_cta(l: &Launch, ctaid: [u32; 3]) -> Result<CtaStats, Fault> {
    let t = l.threads as usize;
    let nw = t.div_ceil(32);
    let mut cta = Cta {
        l,
        ctaid,
        regs: vec![0; nw * 32 * l.prog.nregs as usize],
        pc: vec![0; t],
        st: vec![RUN; t],
        smem: Shared::new(l.smem_bytes, l.prog.static_smem, l.checks.shared),
        asyncs: (0..t).map(|_| AsyncState::default()).collect(),
        stats: CtaStats::default(),
    };
    loop {
        for w in 0..nw as u32 {
            cta.run_warp(w)?;
        }
        if let Some(f) = cta.smem.uninit.take() {
            return Err(f);
        }
        let waiting: Vec<usize> = (0..t).filter(|&i| cta.st[i] == BAR).collect();
        let Some(&first) = waiting.first() else { break };
        let bar = &l.prog.insts[cta.pc[first] as usize];
        if let Some(x) = (0..t).find(|&i| cta.st[i] == EXIT) {
            return Err(Fault::check(
                bar.line,
                first as u32,
                None,
                format!(
                    "bar.sync not reached by all threads: {} thread(s) wait at line {} but thread {x} (and {} other(s)) exited without reaching it — a deadlock on a GPU",
                    waiting.len(),
                    bar.line,
                    t - waiting.len() - 1
                ),
            ));
        }
        if let Some(&o) = waiting.iter().find(|&&i| cta.pc[i] != cta.pc[first]) {
            let other = &l.prog.insts[cta.pc[o] as usize];
            return Err(Fault::check(
                bar.line,
                first as u32,
                None,
                format!(
                    "threads wait at different barriers: thread {first} at line {}, thread {o} at line {}",
                    bar.line, other.line
                ),
            ));
        }
        cta.smem.epoch += 1;
        cta.stats.barriers += 1;
        for &i in &waiting {
            cta.st[i] = RUN;
            cta.pc[i] += 1;
        }
    }
    Ok(cta.stats)
}
