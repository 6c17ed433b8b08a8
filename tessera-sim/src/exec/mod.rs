//! Execution of one CTA: warps of 32 lanes in lockstep, scheduled one warp at a time.
//!
//! **Threads and warps.** A block of (x, y, z) threads is linearized as on a GPU
//! (`x + y·ntid.x + z·ntid.x·ntid.y`); warp `w` holds linear threads `32w .. 32w + 31`.
//!
//! **Divergence: per-lane PCs with min-PC scheduling.** Each lane has its own PC; a warp step
//! executes the instruction at the smallest PC among its running lanes, for exactly the lanes
//! at that PC (then the guard predicate narrows them further). For the structured control flow
//! compilers produce (forward `if` branches, backward loop branches) this is the classic
//! reconvergence order: lanes that skip ahead wait at the join point until the lanes behind
//! catch up, and a loop keeps its iterating lanes together while the finished ones wait at the
//! exit. It needs no reconvergence stack and no post-dominator analysis, and it is also correct
//! for unstructured branches (lanes just reconverge later). Warp-collective instructions
//! (`shfl.sync`, `vote.sync`, `ldmatrix`, `mma`) see exactly the lanes that execute them,
//! so a collective reached by a divergent subset is caught.
//!
//! **Barriers.** A lane reaching `bar.sync` waits; a warp runs until all its live lanes wait or
//! exited. When every warp is blocked, the CTA checks that all non-exited threads wait at the
//! same `bar.sync` (else: a finding that ends the CTA — on a GPU it would deadlock or be
//! undefined) and releases them into a new barrier epoch (the shared-memory race checker's unit
//! of ordering).
//!
//! **Findings.** A faulting access is reported and suppressed (a load yields 0), and the warp
//! goes on, like compute-sanitizer's memcheck; only findings that leave no meaningful way to
//! continue (a barrier deadlock, no termination) end the CTA.

pub(crate) mod alu;
mod mem;
mod warp;

use crate::Options;
use crate::check::{Collector, Fault, Stop, fmt_thread};
use crate::counters::Counters;
use crate::memory::global::Global;
use crate::memory::local::Local;
use crate::memory::shared::Shared;
use crate::module::ir::{Class, Inst, LaneMask, Op, Opd, Program, Sreg};
use crate::report::FindingKind;
use std::collections::VecDeque;

const RUN: u8 = 0;
const BAR: u8 = 1;
const EXIT: u8 = 2;

/// Everything CTAs of one launch share.
pub(crate) struct Launch<'a> {
    pub prog: &'a Program,
    pub global: Global<'a>,
    pub params: Vec<u8>,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub threads: u32,
    pub smem_bytes: usize,
    pub opts: &'a Options,
}

/// Counters of one CTA.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CtaStats {
    pub warp_insts: u64,
    pub lane_insts: u64,
    pub barriers: u64,
}

/// What one CTA produced.
pub(crate) struct CtaResult {
    pub stats: CtaStats,
    pub counters: Counters,
    pub findings: Collector,
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
    pub block: [u32; 3],
    pub ctaid: [u32; 3],
    pub nctaid: [u32; 3],
    /// `Options::perturb_approx` and the executing instruction's line (its hash key).
    pub perturb: Option<u64>,
    pub line: u32,
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
            Opd::Sreg(s) => self.sreg(s, lane),
            _ => 0,
        }
    }

    fn sreg(&self, s: Sreg, lane: usize) -> u64 {
        let t = self.warp * 32 + lane as u32;
        let [bx, by, bz] = self.block;
        (match s {
            Sreg::Tid(0) => t % bx,
            Sreg::Tid(1) => (t / bx) % by,
            Sreg::Tid(_) => t / (bx * by),
            Sreg::Ntid(0) => bx,
            Sreg::Ntid(1) => by,
            Sreg::Ntid(_) => bz,
            Sreg::Ctaid(i) => self.ctaid[i as usize],
            Sreg::Nctaid(i) => self.nctaid[i as usize],
            Sreg::LaneId => lane as u32,
            Sreg::WarpId => self.warp,
            Sreg::LaneMask(m) => {
                let bit = 1u64 << lane;
                (match m {
                    LaneMask::Eq => bit,
                    LaneMask::Lt => bit - 1,
                    LaneMask::Le => (bit << 1) - 1,
                    LaneMask::Gt => !((bit << 1) - 1) & 0xffff_ffff,
                    LaneMask::Ge => !(bit - 1) & 0xffff_ffff,
                }) as u32
            }
        }) as u64
    }

    #[inline]
    pub(crate) fn wr(&mut self, r: u32, lane: usize, v: u64) {
        self.regs[r as usize * 32 + lane] = v;
    }

    #[inline]
    pub(crate) fn put(&mut self, d: &Opd, lane: usize, v: u64) {
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

    pub(crate) fn map4(&mut self, a: &[Opd], mask: u32, f: impl Fn(u64, u64, u64, u64) -> u64) {
        for lane in Self::iter(mask) {
            let v = f(
                self.rd(&a[1], lane),
                self.rd(&a[2], lane),
                self.rd(&a[3], lane),
                self.rd(&a[4], lane),
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
        b: Option<crate::module::ir::BoolOp>,
    ) {
        use crate::module::ir::BoolOp;
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
    pub smem: Shared<'a>,
    pub local: Local,
    pub asyncs: Vec<AsyncState>,
    pub stats: CtaStats,
    pub counters: Counters,
    pub findings: Collector,
    /// Warp instructions per warp since the last barrier release (barrier stall counter).
    since: Vec<u64>,
}

impl<'a> Cta<'a> {
    fn lanes(&mut self, w: u32, line: u32) -> Lanes<'_> {
        let n = self.l.prog.nregs as usize * 32;
        Lanes {
            regs: &mut self.regs[w as usize * n..(w as usize + 1) * n],
            warp: w,
            block: self.l.block,
            ctaid: self.ctaid,
            nctaid: self.l.grid,
            perturb: self.l.opts.perturb_approx,
            line,
        }
    }

    /// Address operand value for `lane` of warp `w`.
    pub(crate) fn addr(&self, w: u32, o: &Opd, lane: usize) -> u64 {
        let Opd::Mem(a) = o else { return u64::MAX };
        let b = match a.base {
            crate::module::ir::Base::Reg(r) => {
                self.regs[(w as usize * self.l.prog.nregs as usize + r as usize) * 32 + lane]
            }
            crate::module::ir::Base::Abs(x) => x,
            crate::module::ir::Base::Param(p) => p as u64,
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

    /// Records a finding at instruction `inst`.
    pub(crate) fn report(&mut self, inst: &Inst, f: Fault) {
        self.findings.push(f, &inst.text);
    }

    /// Moves the memories' findings of instruction `inst` to the collector.
    fn flush(&mut self, inst: &Inst) {
        if !self.smem.faults.is_empty() {
            for f in std::mem::take(&mut self.smem.faults) {
                self.findings.push(f, &inst.text);
            }
        }
        if !self.local.faults.is_empty() {
            for f in std::mem::take(&mut self.local.faults) {
                self.findings.push(f, &inst.text);
            }
        }
    }

    /// Moves findings reported at the end of an epoch (found at earlier instructions).
    fn flush_epoch(&mut self) {
        self.smem.end_epoch();
        for f in std::mem::take(&mut self.smem.faults) {
            let text = self
                .l
                .prog
                .insts
                .iter()
                .find(|i| i.line == f.line)
                .map(|i| i.text.to_string())
                .unwrap_or_default();
            self.findings.push(f, &text);
        }
    }

    fn run_warp(&mut self, w: u32) -> Result<(), Stop> {
        let base = w as usize * 32;
        let n = (self.l.threads as usize - base).min(32);
        let ninst = self.l.prog.insts.len() as u32;
        let fuel = self.l.opts.max_warp_instructions;
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
            self.since[w as usize] += 1;
            if self.stats.warp_insts > fuel {
                let i = &self.l.prog.insts[minpc as usize];
                self.report(
                    i,
                    Fault::new(
                        FindingKind::NonTermination,
                        i.line,
                        base as u32 + mask.trailing_zeros(),
                        None,
                        format!(
                            "the CTA executed {fuel} warp instructions without finishing (an infinite loop?)"
                        ),
                    ),
                );
                return Err(Stop::EndCta);
            }
            self.findings.next_step();
            self.step(w, minpc, mask)?;
        }
    }

    fn count(&mut self, class: Class) {
        let m = &mut self.counters.mix;
        match class {
            Class::Mma => m.mma += 1,
            Class::Ldmatrix => m.ldmatrix += 1,
            Class::GlobalLoad => m.global_loads += 1,
            Class::GlobalStore => m.global_stores += 1,
            Class::SharedLoad => m.shared_loads += 1,
            Class::SharedStore => m.shared_stores += 1,
            Class::LocalLoad => m.local_loads += 1,
            Class::LocalStore => m.local_stores += 1,
            Class::ParamLoad => m.param_loads += 1,
            Class::Atomic => m.atomics += 1,
            Class::AsyncCopy => m.async_copies += 1,
            Class::Collective => m.collectives += 1,
            Class::Alu => m.alu += 1,
            Class::Sfu => m.sfu += 1,
            Class::Control => m.control += 1,
            // counted by `mem` once the space is known
            Class::GenericLoad | Class::GenericStore => {}
        }
    }

    fn step(&mut self, w: u32, pc: u32, mask: u32) -> Result<(), Stop> {
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
        self.count(inst.class);
        let first = base as u32 + mask.trailing_zeros();
        match &inst.op {
            Op::Alu { .. } | Op::Cvt { .. } | Op::CvtPack { .. } | Op::MovVec { .. } => {
                alu::exec(&inst.op, &inst.args, &mut self.lanes(w, inst.line), emask)
                    .map_err(|m| Stop::Unsupported(inst.line, format!("`{}`: {m}", inst.text)))?;
            }
            Op::Ld { .. }
            | Op::St { .. }
            | Op::Atom { .. }
            | Op::CpAsync { .. }
            | Op::CpCommit
            | Op::CpWait { .. }
            | Op::CpWaitAll => {
                self.mem(w, inst, emask)?;
                self.flush(inst);
            }
            Op::Shfl { .. } | Op::Vote { .. } | Op::Ldmatrix { .. } => {
                self.warp_op(w, inst, emask);
                self.flush(inst);
            }
            Op::Mma { k, a, b } => {
                if emask == u32::MAX {
                    crate::mma::mma(&mut self.lanes(w, inst.line), &inst.args, *k, *a, *b);
                } else if emask != 0 {
                    let msg = format!(
                        "mma.sync executed by lanes {emask:#010x}: all 32 lanes of the warp must execute it (not performed)"
                    );
                    self.report(
                        inst,
                        Fault::new(
                            FindingKind::DivergentCollective,
                            inst.line,
                            first,
                            None,
                            msg,
                        ),
                    );
                }
            }
            Op::Fence => {}
            Op::Bra { uni } => {
                self.counters.branches += 1;
                if emask != 0 && emask != mask {
                    self.counters.divergent_branches += 1;
                    if *uni {
                        let msg = format!(
                            "bra.uni with a divergent predicate: lanes {emask:#010x} of {mask:#010x} take it"
                        );
                        self.report(
                            inst,
                            Fault::new(
                                FindingKind::DivergentCollective,
                                inst.line,
                                first,
                                None,
                                msg,
                            ),
                        );
                    }
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

    /// Runs every warp until all are blocked, then releases a barrier; until every thread
    /// exited or a finding ends the CTA.
    fn run(&mut self) -> Result<(), Stop> {
        let l = self.l;
        let t = l.threads as usize;
        let nw = t.div_ceil(32);
        loop {
            for w in 0..nw as u32 {
                self.run_warp(w)?;
            }
            self.flush_epoch();
            let waiting: Vec<usize> = (0..t).filter(|&i| self.st[i] == BAR).collect();
            let Some(&first) = waiting.first() else {
                return Ok(());
            };
            let bar = &l.prog.insts[self.pc[first] as usize];
            let block = l.block;
            if let Some(x) = (0..t).find(|&i| self.st[i] == EXIT) {
                let msg = format!(
                    "bar.sync not reached by all threads: {} thread(s) wait at line {} but thread {} (and {} other(s)) exited without reaching it — a deadlock on a GPU",
                    waiting.len(),
                    bar.line,
                    fmt_thread(x as u32, block),
                    t - waiting.len() - 1
                );
                self.report(
                    bar,
                    Fault::new(
                        FindingKind::BarrierDeadlock,
                        bar.line,
                        first as u32,
                        None,
                        msg,
                    ),
                );
                return Err(Stop::EndCta);
            }
            if let Some(&o) = waiting.iter().find(|&&i| self.pc[i] != self.pc[first]) {
                let other = &l.prog.insts[self.pc[o] as usize];
                let msg = format!(
                    "threads wait at different barriers: thread {} at line {}, thread {} at line {}",
                    fmt_thread(first as u32, block),
                    bar.line,
                    fmt_thread(o as u32, block),
                    other.line
                );
                self.report(
                    bar,
                    Fault::new(
                        FindingKind::BarrierDeadlock,
                        bar.line,
                        first as u32,
                        None,
                        msg,
                    ),
                );
                return Err(Stop::EndCta);
            }
            // barrier stall steps: the imbalance among the warps waiting here
            let waiting_warps: Vec<usize> = (0..nw)
                .filter(|&w| (w * 32..(w * 32 + 32).min(t)).any(|i| self.st[i] == BAR))
                .collect();
            let most = waiting_warps
                .iter()
                .map(|&w| self.since[w])
                .max()
                .unwrap_or(0);
            for &w in &waiting_warps {
                self.counters.barrier_stall_steps += most - self.since[w];
            }
            self.since.iter_mut().for_each(|s| *s = 0);
            self.smem.epoch += 1;
            self.stats.barriers += 1;
            for &i in &waiting {
                self.st[i] = RUN;
                self.pc[i] += 1;
            }
        }
    }
}

/// Runs CTA `ctaid` to completion (or until a finding ends it). `Err` is a simulator
/// limitation found at run time.
pub(crate) fn run_cta(l: &Launch, ctaid: [u32; 3]) -> Result<CtaResult, (u32, String)> {
    let t = l.threads as usize;
    let nw = t.div_ceil(32);
    let mut cta = Cta {
        l,
        ctaid,
        regs: vec![0; nw * 32 * l.prog.nregs as usize],
        pc: vec![0; t],
        st: vec![RUN; t],
        smem: Shared::new(
            l.smem_bytes,
            l.prog.static_smem,
            l.opts.checks.shared,
            &l.prog.shared_syms,
            l.block,
        ),
        local: Local::new(l.prog.local_bytes, t),
        asyncs: (0..t).map(|_| AsyncState::default()).collect(),
        stats: CtaStats::default(),
        counters: Counters::default(),
        findings: Collector::new(ctaid, l.block, l.opts.max_findings),
        since: vec![0; nw],
    };
    match cta.run() {
        Ok(()) | Err(Stop::EndCta) => {}
        Err(Stop::Unsupported(line, m)) => return Err((line, m)),
    }
    Ok(CtaResult {
        stats: cta.stats,
        counters: cta.counters,
        findings: cta.findings,
    })
}
