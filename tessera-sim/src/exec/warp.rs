//! Warp-collective instructions: `shfl.sync` (exact PTX semantics incl. the `c` operand and the
//! `|p` output), `vote.sync`, and `ldmatrix` (x1/x2/x4, with and without `.trans`). A
//! collective executed by the wrong lanes is a finding; the lanes that did execute it still
//! get a result (a shuffle from a lane that did not execute reads that lane's register).

use super::mem::Accesses;
use super::{Cta, Lanes};
use crate::check::Fault;
use crate::counters;
use crate::module::ir::{Inst, Op, Opd, Shfl, Vote};
use crate::report::FindingKind;

impl Cta<'_> {
    /// A finding if a lane's membermask is not exactly the executing lanes.
    fn membermask(&mut self, w: u32, inst: &Inst, o: &Opd, emask: u32) {
        for lane in Lanes::iter(emask) {
            let mm = self.val(w, o, lane) as u32;
            if mm & (1 << lane) == 0 || mm & !emask != 0 {
                let msg = format!(
                    "`{}`: membermask {mm:#010x} but the lanes executing it are {emask:#010x} (every lane of membermask must execute it, and only those)",
                    inst.text
                );
                self.report(
                    inst,
                    Fault::new(
                        FindingKind::DivergentCollective,
                        inst.line,
                        w * 32 + lane as u32,
                        None,
                        msg,
                    ),
                );
                return;
            }
        }
    }

    pub(super) fn warp_op(&mut self, w: u32, inst: &Inst, emask: u32) {
        let a = &inst.args;
        let base = w * 32;
        if emask == 0 {
            return;
        }
        match inst.op {
            Op::Shfl { mode } => {
                self.membermask(w, inst, &a[4], emask);
                let mut src = [0u64; 32];
                for (lane, s) in src.iter_mut().enumerate() {
                    *s = self.val(w, &a[1], lane);
                }
                let mut out = [(0u64, false); 32];
                let mut bad = None;
                for lane in Lanes::iter(emask) {
                    let b = self.val(w, &a[2], lane) as u32 & 0x1f;
                    let c = self.val(w, &a[3], lane) as u32;
                    let seg = (c >> 8) & 0x1f;
                    let cval = c & 0x1f;
                    let l = lane as i32;
                    let max_lane = ((lane as u32 & seg) | (cval & !seg)) as i32;
                    let min_lane = (lane as u32 & seg) as i32;
                    let (j, ok) = match mode {
                        Shfl::Up => (l - b as i32, l - b as i32 >= max_lane),
                        Shfl::Down => (l + b as i32, l + b as i32 <= max_lane),
                        Shfl::Bfly => (l ^ b as i32, (l ^ b as i32) <= max_lane),
                        Shfl::Idx => {
                            let j = min_lane | (b & !seg) as i32;
                            (j, j <= max_lane)
                        }
                    };
                    let j = if ok { j as usize } else { lane };
                    if emask & (1 << j) == 0 && bad.is_none() {
                        bad = Some((lane, j));
                    }
                    out[lane] = (src[j & 31], ok);
                }
                if let Some((lane, j)) = bad {
                    let msg = format!(
                        "`{}`: lane {lane} reads lane {j}, which does not execute the shuffle (undefined on a GPU)",
                        inst.text
                    );
                    self.report(
                        inst,
                        Fault::new(
                            FindingKind::DivergentCollective,
                            inst.line,
                            base + lane as u32,
                            None,
                            msg,
                        ),
                    );
                }
                for lane in Lanes::iter(emask) {
                    match a[0] {
                        Opd::Pair(d, p) => {
                            self.set(w, &Opd::Reg(d), lane, out[lane].0);
                            self.set(w, &Opd::Reg(p), lane, out[lane].1 as u64);
                        }
                        ref d => self.set(w, d, lane, out[lane].0),
                    }
                }
            }
            Op::Vote { mode } => {
                self.membermask(w, inst, &a[2], emask);
                let mut ballot = 0u32;
                for lane in Lanes::iter(emask) {
                    let v = match a[1] {
                        Opd::Not(r) => self.val(w, &Opd::Reg(r), lane) & 1 == 0,
                        ref o => self.val(w, o, lane) & 1 != 0,
                    };
                    if v {
                        ballot |= 1 << lane;
                    }
                }
                let r = match mode {
                    Vote::Ballot => ballot as u64,
                    Vote::All => (ballot == emask) as u64,
                    Vote::Any => (ballot != 0) as u64,
                    Vote::Uni => (ballot == emask || ballot == 0) as u64,
                };
                for lane in Lanes::iter(emask) {
                    self.set(w, &a[0], lane, r);
                }
            }
            Op::Ldmatrix { num, trans } => {
                if emask != u32::MAX {
                    let msg = format!(
                        "ldmatrix executed by lanes {emask:#010x}: all 32 lanes must execute it (not performed)"
                    );
                    self.report(
                        inst,
                        Fault::new(
                            FindingKind::DivergentCollective,
                            inst.line,
                            base + emask.trailing_zeros(),
                            None,
                            msg,
                        ),
                    );
                    return;
                }
                let mut m = [[[0u16; 8]; 8]; 4];
                let mut rows = Accesses::default();
                for (j, mj) in m.iter_mut().enumerate().take(num as usize) {
                    for (r, row) in mj.iter_mut().enumerate() {
                        let lane = j * 8 + r;
                        let tid = base + lane as u32;
                        let addr = self.addr(w, &a[1], lane);
                        let mut b = [0u8; 16];
                        if !addr.is_multiple_of(16) {
                            let loc = self.smem.location(addr);
                            let msg = format!(
                                "misaligned ldmatrix row address {loc} (must be 16-byte aligned; not performed)"
                            );
                            self.report(
                                inst,
                                Fault::new(FindingKind::Misaligned, inst.line, tid, Some(loc), msg),
                            );
                        } else if self.smem.read(addr, &mut b, inst.line, tid) {
                            rows.push(lane, addr, 16);
                        }
                        for (c, x) in row.iter_mut().enumerate() {
                            *x = u16::from_le_bytes([b[2 * c], b[2 * c + 1]]);
                        }
                    }
                }
                counters::ldmatrix_request(&mut self.counters.ldmatrix, rows.get());
                let Opd::Vec(d) = &a[0] else {
                    unreachable!("decoded")
                };
                for lane in 0..32usize {
                    let (r, c) = (lane / 4, 2 * (lane % 4));
                    for (j, dj) in d.iter().enumerate() {
                        let (lo, hi) = if trans {
                            (m[j][c][r], m[j][c + 1][r])
                        } else {
                            (m[j][r][c], m[j][r][c + 1])
                        };
                        self.set(w, dj, lane, lo as u64 | (hi as u64) << 16);
                    }
                }
            }
            _ => unreachable!("not a warp op"),
        }
    }
}
