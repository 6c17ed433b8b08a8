//! Memory instructions: `ld`/`st` (scalar and `.v2/.v4`, global/shared/param/generic),
//! `atom`/`red`, and `cp.async` with its commit/wait groups (data lands at the wait).

use super::super::check::Fault;
use super::super::convert::{bits_f32, f32_of, ftz, sx, zx};
use super::super::ir::{AtomOp, Inst, Op, Opd, Space, Ty};
use super::super::memory::SHARED_GENERIC;
use super::{AsyncCopy, Cta, Lanes};
use std::sync::Mutex;

/// Global atomics of all CTAs are serialized by this lock (simple and always atomic,
/// whatever the host alignment of the buffer).
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

impl Cta<'_> {
    fn space_of(&self, sp: Space, addr: u64) -> (Space, u64) {
        match sp {
            Space::Generic if (SHARED_GENERIC..SHARED_GENERIC + (1 << 32)).contains(&addr) => {
                (Space::Shared, addr - SHARED_GENERIC)
            }
            Space::Generic => (Space::Global, addr),
            s => (s, addr),
        }
    }

    fn load(
        &mut self,
        sp: Space,
        addr: u64,
        out: &mut [u8],
        line: u32,
        tid: u32,
    ) -> Result<(), Fault> {
        match self.space_of(sp, addr) {
            (Space::Shared, a) => self.smem.read(a, out, line, tid),
            (Space::Param, a) => {
                let p = &self.l.params;
                if a as usize + out.len() > p.len() {
                    return Err(Fault::check(
                        line,
                        tid,
                        Some(a),
                        format!(
                            "param read of {} bytes at offset {a} past the {}-byte parameter block",
                            out.len(),
                            p.len()
                        ),
                    ));
                }
                out.copy_from_slice(&p[a as usize..a as usize + out.len()]);
                Ok(())
            }
            (_, a) => self.l.global.read(a, out, line, tid),
        }
    }

    fn store(
        &mut self,
        sp: Space,
        addr: u64,
        data: &[u8],
        line: u32,
        tid: u32,
    ) -> Result<(), Fault> {
        match self.space_of(sp, addr) {
            (Space::Shared, a) => self.smem.write(a, data, line, tid),
            (_, a) => self.l.global.write(a, data, line, tid),
        }
    }

    pub(super) fn mem(&mut self, w: u32, inst: &Inst, emask: u32) -> Result<(), Fault> {
        let line = inst.line;
        let args = &inst.args;
        let base = w * 32;
        let misaligned = |tid: u32, what: &str, addr: u64, n: usize| {
            Fault::check(
                line,
                tid,
                Some(addr),
                format!(
                    "misaligned {what}: {n}-byte access at {addr:#x} (must be {n}-byte aligned)"
                ),
            )
        };
        match inst.op {
            Op::Ld { space, ty, vec } | Op::St { space, ty, vec } => {
                let is_ld = matches!(inst.op, Op::Ld { .. });
                let esz = ty.bytes() as usize;
                let n = esz * vec as usize;
                let (mo, ro) = if is_ld {
                    (&args[1], &args[0])
                } else {
                    (&args[0], &args[1])
                };
                let elems: Vec<&Opd> = match ro {
                    Opd::Vec(v) => v.iter().collect(),
                    o => vec![o],
                };
                if elems.len() != vec as usize {
                    return Err(Fault::unsupported(
                        line,
                        base,
                        format!(
                            "`{}`: {} registers for a .v{vec} access",
                            inst.text,
                            elems.len()
                        ),
                    ));
                }
                let mut buf = [0u8; 32];
                for lane in Lanes::iter(emask) {
                    let tid = base + lane as u32;
                    let addr = self.addr(w, mo, lane);
                    if !addr.is_multiple_of(n as u64) {
                        return Err(misaligned(
                            tid,
                            if is_ld { "load" } else { "store" },
                            addr,
                            n,
                        ));
                    }
                    if is_ld {
                        self.load(space, addr, &mut buf[..n], line, tid)?;
                        for (i, d) in elems.iter().enumerate() {
                            let v = from_bytes(&buf[i * esz..(i + 1) * esz]);
                            let v = if ty.signed() {
                                sx(v, ty.bits()) as u64
                            } else {
                                v
                            };
                            self.set(w, d, lane, v);
                        }
                    } else {
                        for (i, s) in elems.iter().enumerate() {
                            to_bytes(self.val(w, s, lane), &mut buf[i * esz..(i + 1) * esz]);
                        }
                        self.store(space, addr, &buf[..n], line, tid)?;
                    }
                }
            }
            Op::Atom { space, op, ty, ret } => {
                let n = ty.bytes() as usize;
                let (mi, bi) = if ret { (1, 2) } else { (0, 1) };
                for lane in Lanes::iter(emask) {
                    let tid = base + lane as u32;
                    let addr = self.addr(w, &args[mi], lane);
                    if !addr.is_multiple_of(n as u64) {
                        return Err(misaligned(tid, "atomic", addr, n));
                    }
                    let b = self.val(w, &args[bi], lane);
                    let c = if op == AtomOp::Cas {
                        self.val(w, &args[bi + 1], lane)
                    } else {
                        0
                    };
                    let old = match self.space_of(space, addr) {
                        (Space::Shared, a) => {
                            let m = self.smem.atomic(a, n, line, tid)?;
                            let old = from_bytes(m);
                            to_bytes(atom_apply(op, ty, old, b, c), m);
                            old
                        }
                        (Space::Param, _) => {
                            return Err(Fault::unsupported(line, tid, "atomics on .param"));
                        }
                        (_, a) => {
                            let p = self.l.global.locate(a, n, true, line, tid)?;
                            let _g = ATOMICS.lock().unwrap_or_else(|e| e.into_inner());
                            // SAFETY: `locate` checked the range; the lock serializes atomics.
                            let m = unsafe { std::slice::from_raw_parts_mut(p, n) };
                            let old = from_bytes(m);
                            to_bytes(atom_apply(op, ty, old, b, c), m);
                            old
                        }
                    };
                    if ret {
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
                let cp = bytes as u64;
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
                        return Err(misaligned(tid, "cp.async destination", dst, cp as usize));
                    }
                    if !src.is_multiple_of(cp) {
                        return Err(misaligned(tid, "cp.async source", src, cp as usize));
                    }
                    if ss > cp {
                        return Err(Fault::check(
                            line,
                            tid,
                            Some(src),
                            format!("cp.async src-size {ss} is larger than cp-size {cp}"),
                        ));
                    }
                    let mut data = [0u8; 16];
                    if ss > 0 {
                        self.l
                            .global
                            .read(src, &mut data[..ss as usize], line, tid)?;
                    }
                    self.smem.issue_async(dst, cp as usize, line, tid)?;
                    self.asyncs[tid as usize].open.push(AsyncCopy {
                        dst,
                        data,
                        n: bytes,
                        line,
                    });
                }
            }
            Op::CpCommit => {
                for lane in Lanes::iter(emask) {
                    let a = &mut self.asyncs[(base + lane as u32) as usize];
                    let g = std::mem::take(&mut a.open);
                    a.groups.push_back(g);
                }
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
                            .land_async(c.dst, &c.data[..c.n as usize], c.line, tid)?;
                    }
                }
            }
            _ => unreachable!("not a memory op"),
        }
        Ok(())
    }
}
