//! Memory instructions: `ld`/`st` (scalar and `.v2/.v4`, global/shared/local/param/generic),
//! `atom`/`red`, and `cp.async` with its commit/wait groups (data lands at the wait). A
//! faulting lane's access is reported and not performed (a load yields 0); the other lanes go
//! on. Each warp-level request also feeds the shared-bank and global-sector counters.

use super::{AsyncCopy, Cta, Lanes};
use crate::check::{Fault, Stop};
use crate::convert::{bits_f32, f32_of, ftz, sx, zx};
use crate::counters::{self, Access};
use crate::memory::global::{load, store};
use crate::memory::{LOCAL_GENERIC, SHARED_GENERIC};
use crate::module::ir::{AtomOp, Inst, Op, Opd, Space, Ty};
use crate::report::{FindingKind, Location};
use std::sync::Mutex;

/// Global atomics of all CTAs are serialized by this lock (simple and always atomic).
static ATOMICS: Mutex<()> = Mutex::new(());

fn atom_apply(op: AtomOp, t: Ty, old: u64, b: u64, c: u64) -> u64 {
    let w = t.bits();
    let (o, v) = (zx(old, w), zx(b, w));
    match op {
        AtomOp::Add if t == Ty::F32 => bits_f32(ftz(ftz(f32_of(o)) + ftz(f32_of(v)))),
        AtomOp::Add => zx(o.wrapping_add(v), w),
        AtomOp::Min if t.signed() => zx(sx(o, w).min(sx(v, w)) as u64, w),
        AtomOp::Max if t.signed() => zx(sx(o, w).max(sx(v, w)) as u64, w),
        AtomOp::Min => o.min(v),
        AtomOp::Max => o.max(v),
        AtomOp::And => o & v,
        AtomOp::Or => o | v,
        AtomOp::Xor => o ^ v,
        AtomOp::Exch => v,
        AtomOp::Cas => {
            if o == v {
                zx(c, w)
            } else {
                o
            }
        }
        AtomOp::Inc => {
            if o >= v {
                0
            } else {
                o + 1
            }
        }
        AtomOp::Dec => {
            if o == 0 || o > v {
                v
            } else {
                o - 1
            }
        }
    }
}

fn to_bytes(v: u64, out: &mut [u8]) {
    out.copy_from_slice(&v.to_le_bytes()[..out.len()]);
}

fn from_bytes(b: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    x[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(x)
}

/// The state space a (possibly generic) address falls in, and the address in that space.
fn resolve(sp: Space, addr: u64) -> (Space, u64) {
    match sp {
        Space::Generic if (SHARED_GENERIC..SHARED_GENERIC + (1 << 32)).contains(&addr) => {
            (Space::Shared, addr - SHARED_GENERIC)
        }
        Space::Generic if (LOCAL_GENERIC..LOCAL_GENERIC + (1 << 32)).contains(&addr) => {
            (Space::Local, addr - LOCAL_GENERIC)
        }
        Space::Generic => (Space::Global, addr),
        s => (s, addr),
    }
}

/// Up to 32 accesses of one warp request (no allocation on the hot path).
pub(super) struct Accesses {
    a: [Access; 32],
    n: usize,
}

impl Default for Accesses {
    fn default() -> Self {
        Accesses {
            a: [Access::default(); 32],
            n: 0,
        }
    }
}

impl Accesses {
    pub(super) fn push(&mut self, lane: usize, addr: u64, bytes: usize) {
        if self.n < 32 {
            self.a[self.n] = Access {
                lane: lane as u8,
                addr,
                bytes: bytes as u8,
            };
            self.n += 1;
        }
    }

    pub(super) fn get(&self) -> &[Access] {
        &self.a[..self.n]
    }
}

/// The accesses of one warp request, split by the space they went to.
#[derive(Default)]
struct Requests {
    global: Accesses,
    shared: Accesses,
}

impl Requests {
    fn push(&mut self, sp: Space, lane: usize, addr: u64, bytes: usize) {
        match sp {
            Space::Global => self.global.push(lane, addr, bytes),
            Space::Shared => self.shared.push(lane, addr, bytes),
            _ => {}
        }
    }
}

impl Cta<'_> {
    /// Reads `out.len()` bytes at `addr` of space `sp` (resolved); false when not performed.
    fn load(&mut self, sp: Space, addr: u64, out: &mut [u8], inst: &Inst, tid: u32) -> bool {
        let line = inst.line;
        match sp {
            Space::Shared => self.smem.read(addr, out, line, tid),
            Space::Local => self.local.read(addr, out, line, tid),
            Space::Param => {
                let p = &self.l.params;
                if addr
                    .checked_add(out.len() as u64)
                    .is_none_or(|e| e > p.len() as u64)
                {
                    let msg = format!(
                        "param read of {} bytes at offset {addr} past the {}-byte parameter block",
                        out.len(),
                        p.len()
                    );
                    self.report(
                        inst,
                        Fault::new(
                            FindingKind::OutOfBounds,
                            line,
                            tid,
                            Some(Location::Param { offset: addr }),
                            msg,
                        ),
                    );
                    out.fill(0);
                    return false;
                }
                out.copy_from_slice(&p[addr as usize..addr as usize + out.len()]);
                true
            }
            _ => match self.l.global.access(addr, out.len(), false, line, tid) {
                Ok(m) => {
                    load(m, out);
                    true
                }
                Err(f) => {
                    self.report(inst, f);
                    out.fill(0);
                    false
                }
            },
        }
    }

    /// Writes `data` at `addr` of space `sp` (resolved); false when not performed.
    fn store(&mut self, sp: Space, addr: u64, data: &[u8], inst: &Inst, tid: u32) -> bool {
        let line = inst.line;
        match sp {
            Space::Shared => self.smem.write(addr, data, line, tid),
            Space::Local => self.local.write(addr, data, line, tid),
            _ => match self.l.global.access(addr, data.len(), true, line, tid) {
                Ok(m) => {
                    store(m, data);
                    true
                }
                Err(f) => {
                    self.report(inst, f);
                    false
                }
            },
        }
    }

    /// The named location of `addr` in space `sp` (resolved).
    fn location_of(&self, sp: Space, addr: u64) -> Option<Location> {
        match sp {
            Space::Shared => Some(self.smem.location(addr)),
            Space::Local => Some(Location::Local { offset: addr }),
            Space::Param => Some(Location::Param { offset: addr }),
            _ => self.l.global.location(addr),
        }
    }

    fn report_misaligned(
        &mut self,
        inst: &Inst,
        tid: u32,
        what: &str,
        sp: Space,
        addr: u64,
        n: usize,
    ) {
        let loc = self.location_of(sp, addr);
        let at = match &loc {
            Some(l) => l.to_string(),
            None => format!("address {addr:#x}"),
        };
        let msg = format!(
            "misaligned {what}: {n}-byte access at {at} (must be {n}-byte aligned; not performed)"
        );
        self.report(
            inst,
            Fault::new(FindingKind::Misaligned, inst.line, tid, loc, msg),
        );
    }

    /// Counts a resolved generic access in the instruction mix (by the first lane's space).
    fn count_generic(&mut self, sp: Space, load: bool) {
        let m = &mut self.counters.mix;
        match (sp, load) {
            (Space::Shared, true) => m.shared_loads += 1,
            (Space::Shared, false) => m.shared_stores += 1,
            (Space::Local, true) => m.local_loads += 1,
            (Space::Local, false) => m.local_stores += 1,
            (_, true) => m.global_loads += 1,
            (_, false) => m.global_stores += 1,
        }
    }

    pub(super) fn mem(&mut self, w: u32, inst: &Inst, emask: u32) -> Result<(), Stop> {
        let line = inst.line;
        let args = &inst.args;
        let base = w * 32;
        let mut req = Requests::default();
        let is_load;
        match inst.op {
            Op::Ld { space, ty, vec, .. } | Op::St { space, ty, vec } => {
                is_load = matches!(inst.op, Op::Ld { .. });
                let esz = ty.bytes() as usize;
                let n = esz * vec as usize;
                let (mo, ro) = if is_load {
                    (&args[1], &args[0])
                } else {
                    (&args[0], &args[1])
                };
                let elems: &[Opd] = match ro {
                    Opd::Vec(v) => v,
                    o => std::slice::from_ref(o),
                };
                if elems.len() != vec as usize {
                    return Err(Stop::Unsupported(
                        line,
                        format!(
                            "`{}`: {} registers for a .v{vec} access",
                            inst.text,
                            elems.len()
                        ),
                    ));
                }
                let mut first_space = None;
                let mut buf = [0u8; 32];
                for lane in Lanes::iter(emask) {
                    let tid = base + lane as u32;
                    let (sp, addr) = resolve(space, self.addr(w, mo, lane));
                    first_space.get_or_insert(sp);
                    let ok = if !addr.is_multiple_of(n as u64) {
                        let what = if is_load { "load" } else { "store" };
                        self.report_misaligned(inst, tid, what, sp, addr, n);
                        buf[..n].fill(0);
                        false
                    } else if is_load {
                        self.load(sp, addr, &mut buf[..n], inst, tid)
                    } else {
                        for (i, s) in elems.iter().enumerate() {
                            to_bytes(self.val(w, s, lane), &mut buf[i * esz..(i + 1) * esz]);
                        }
                        self.store(sp, addr, &buf[..n], inst, tid)
                    };
                    if ok {
                        req.push(sp, lane, addr, n);
                    }
                    if is_load {
                        for (i, d) in elems.iter().enumerate() {
                            let v = from_bytes(&buf[i * esz..(i + 1) * esz]);
                            let v = if ty.signed() {
                                sx(v, ty.bits()) as u64
                            } else {
                                v
                            };
                            self.set(w, d, lane, v);
                        }
                    }
                }
                if space == Space::Generic
                    && let Some(sp) = first_space
                {
                    self.count_generic(sp, is_load);
                }
            }
            Op::Atom { space, op, ty, ret } => {
                is_load = false;
                let n = ty.bytes() as usize;
                let (mi, bi) = if ret { (1, 2) } else { (0, 1) };
                for lane in Lanes::iter(emask) {
                    let tid = base + lane as u32;
                    let (sp, addr) = resolve(space, self.addr(w, &args[mi], lane));
                    if !addr.is_multiple_of(n as u64) {
                        self.report_misaligned(inst, tid, "atomic", sp, addr, n);
                        continue;
                    }
                    let b = self.val(w, &args[bi], lane);
                    let c = if op == AtomOp::Cas {
                        self.val(w, &args[bi + 1], lane)
                    } else {
                        0
                    };
                    let old = match sp {
                        Space::Shared => match self.smem.atomic(addr, n, line, tid) {
                            Some(m) => {
                                let old = from_bytes(m);
                                to_bytes(atom_apply(op, ty, old, b, c), m);
                                Some(old)
                            }
                            None => None,
                        },
                        Space::Local | Space::Param => {
                            return Err(Stop::Unsupported(
                                line,
                                format!("`{}`: an atomic on .local/.param memory", inst.text),
                            ));
                        }
                        _ => match self.l.global.access(addr, n, true, line, tid) {
                            Ok(m) => {
                                let _g = ATOMICS.lock().unwrap_or_else(|e| e.into_inner());
                                let mut cur = [0u8; 8];
                                load(m, &mut cur[..n]);
                                let old = from_bytes(&cur[..n]);
                                to_bytes(atom_apply(op, ty, old, b, c), &mut cur[..n]);
                                store(m, &cur[..n]);
                                Some(old)
                            }
                            Err(f) => {
                                self.report(inst, f);
                                None
                            }
                        },
                    };
                    if old.is_some() {
                        req.push(sp, lane, addr, n);
                    }
                    if ret {
                        let old = old.unwrap_or(0);
                        let v = if ty.signed() {
                            sx(old, ty.bits()) as u64
                        } else {
                            old
                        };
                        self.set(w, &args[0], lane, v);
                    }
                }
            }
            Op::CpAsync { bytes } => {
                is_load = false;
                let cp = bytes as u64;
                let mut src_req = Accesses::default();
                for lane in Lanes::iter(emask) {
                    let tid = base + lane as u32;
                    let dst = self.addr(w, &args[0], lane);
                    let src = self.addr(w, &args[1], lane);
                    let ss = if args.len() == 4 {
                        zx(self.val(w, &args[3], lane), 32)
                    } else {
                        cp
                    };
                    if !dst.is_multiple_of(cp) {
                        self.report_misaligned(
                            inst,
                            tid,
                            "cp.async destination",
                            Space::Shared,
                            dst,
                            cp as usize,
                        );
                        continue;
                    }
                    if !src.is_multiple_of(cp) {
                        self.report_misaligned(
                            inst,
                            tid,
                            "cp.async source",
                            Space::Global,
                            src,
                            cp as usize,
                        );
                        continue;
                    }
                    if ss > cp {
                        let loc = self.l.global.location(src);
                        self.report(
                            inst,
                            Fault::new(
                                FindingKind::InvalidOperand,
                                line,
                                tid,
                                loc,
                                format!(
                                    "cp.async src-size {ss} is larger than cp-size {cp} (not performed)"
                                ),
                            ),
                        );
                        continue;
                    }
                    let mut data = [0u8; 16];
                    if ss > 0 {
                        match self.l.global.access(src, ss as usize, false, line, tid) {
                            Ok(m) => {
                                load(m, &mut data[..ss as usize]);
                                src_req.push(lane, src, ss as usize);
                            }
                            Err(f) => self.report(inst, f),
                        }
                    }
                    if !self.smem.issue_async(dst, cp as usize, line, tid) {
                        continue;
                    }
                    req.push(Space::Shared, lane, dst, cp as usize);
                    self.asyncs[tid as usize].open.push(AsyncCopy {
                        dst,
                        data,
                        n: bytes,
                        line,
                    });
                }
                counters::global_request(&mut self.counters.global_loads, src_req.get());
            }
            Op::CpCommit => {
                for lane in Lanes::iter(emask) {
                    let a = &mut self.asyncs[(base + lane as u32) as usize];
                    let g = std::mem::take(&mut a.open);
                    a.groups.push_back(g);
                }
                return Ok(());
            }
            Op::CpWait { .. } | Op::CpWaitAll => {
                let keep = if let Op::CpWait { n } = inst.op {
                    n as usize
                } else {
                    0
                };
                for lane in Lanes::iter(emask) {
                    let tid = base + lane as u32;
                    let a = &mut self.asyncs[tid as usize];
                    if matches!(inst.op, Op::CpWaitAll) {
                        let g = std::mem::take(&mut a.open);
                        a.groups.push_back(g);
                    }
                    let mut landed = Vec::new();
                    while a.groups.len() > keep {
                        landed.extend(a.groups.pop_front().unwrap_or_default());
                    }
                    for c in landed {
                        self.smem
                            .land_async(c.dst, &c.data[..c.n as usize], c.line, tid);
                    }
                }
                return Ok(());
            }
            _ => unreachable!("not a memory op"),
        }
        let c = &mut self.counters;
        if is_load {
            counters::global_request(&mut c.global_loads, req.global.get());
            counters::shared_request(&mut c.shared_loads, req.shared.get());
        } else {
            counters::global_request(&mut c.global_stores, req.global.get());
            counters::shared_request(&mut c.shared_stores, req.shared.get());
        }
        Ok(())
    }
}
