//! The Tile IR `fft` / `ifft` op: a shared-memory Stockham transform of an `f32[L, W]` tile
//! (`W / 2` complex columns, each one length-`L` transform along the rows).
//!
//! The tile is written row-major to shared memory (`L·W` floats), then each stage reads one
//! buffer and writes the other (Stockham autosort: no bit reversal): a radix-2 stage first when
//! `log2 L` is odd, then radix-4 stages. A stage has `L/R · W/2` butterflies; the block's
//! threads take them in turn (a run-time loop, so the code does not grow with `L`). Twiddles
//! `e^{∓2πi·m/L}` are computed in registers: `m` is reduced to a quadrant exactly in integers,
//! and `sin`/`cos` of the remaining angle in `[0, π/2)` are Taylor polynomials (degree 11 / 12,
//! truncation below 6·10⁻⁸) evaluated with FMA, so no special-function unit or table is needed.
//! The result is read back into the tile's register layout (scaled by `1/L` for the inverse).
//! Shared memory: `2·L·W·4` bytes (dynamic above 48 KiB).
//!
//! **Direct path.** When the transformed tile comes straight from an unmasked `load` used only
//! by the `fft`, and the result goes only to an unmasked `store` (what `lower/fft.rs`
//! produces), the tile never lives in registers: the block copies global memory into shared
//! memory (consecutive threads read consecutive floats, bounds-checked), runs the stages, and
//! copies the result (scaled for the inverse) from shared memory to global memory. A tall tile
//! such as `f32[4096, 2]` would otherwise need thousands of registers per thread in the
//! generic layout (rows over warps, columns over lanes).

use super::G;
use super::layout::DVal;
use crate::DType;
use crate::target::ptx::EmitError;
use crate::target::ptx::asm::{Reg, flit};
use crate::tile::TValue;

/// The radices of the stages for length `l`: a 2 first when `log2 l` is odd, then 4s.
pub(crate) fn radices(l: usize) -> Vec<usize> {
    let log = l.trailing_zeros() as usize;
    let mut out = if log % 2 == 1 { vec![2] } else { vec![] };
    out.extend(std::iter::repeat_n(4, log / 2));
    out
}

/// Where a direct-path `fft` reads and writes: the load's and the store's parameter and index.
#[derive(Clone, Debug)]
pub(super) struct Direct {
    pub param: usize,
    pub index: Vec<TValue>,
}

/// Finds the `load → fft → store` chains of `k` that take the direct path: the loads to skip
/// (by result) and the stores to replace (by the stored value), each with its access.
pub(super) fn direct_chains(
    k: &crate::tile::Kernel,
) -> (
    std::collections::HashMap<TValue, Direct>,
    std::collections::HashMap<TValue, Direct>,
) {
    use crate::tile::Op;
    use std::collections::HashMap;
    let mut uses = vec![0usize; k.types.len()];
    let mut def: HashMap<TValue, usize> = HashMap::new();
    for (i, d) in k.insts.iter().enumerate() {
        for o in d.op.operands() {
            uses[o.index()] += 1;
        }
        for r in &d.results {
            def.insert(*r, i);
        }
    }
    let f32_param = |p: usize| k.params[p].dtype == crate::DType::F32;
    let (mut loads, mut stores) = (HashMap::new(), HashMap::new());
    for d in &k.insts {
        let Op::Fft { a, .. } = &d.op else { continue };
        let y = d.results[0];
        if uses[a.index()] != 1 || uses[y.index()] != 1 {
            continue;
        }
        let Some(Op::Load {
            param,
            index,
            mask: None,
            other,
        }) = def.get(a).map(|&i| &k.insts[i].op)
        else {
            continue;
        };
        if *other != 0.0 || !f32_param(*param) {
            continue;
        }
        let store = k.insts.iter().find_map(|s| match &s.op {
            Op::Store {
                param,
                index,
                value,
                mask: None,
            } if *value == y && f32_param(*param) => Some(Direct {
                param: *param,
                index: index.clone(),
            }),
            _ => None,
        });
        if let Some(store) = store {
            let load = Direct {
                param: *param,
                index: index.clone(),
            };
            loads.insert(*a, load);
            stores.insert(y, store);
        }
    }
    (loads, stores)
}

impl G<'_> {
    /// The direct path: global → shared (`load`), stages, kept in shared memory for the store.
    pub(super) fn fft_direct(&mut self, src: &Direct, l: usize, w: usize, inverse: bool) -> usize {
        let buf = l * w * 4;
        self.need_smem(2 * buf);
        self.a.comment(format!(
            "{} of {} columns of length {l}, global -> shared -> global (Stockham, stages {:?})",
            if inverse { "ifft" } else { "fft" },
            w / 2,
            radices(l)
        ));
        self.block_copy(src, l, w, 0, true, 1.0);
        self.bar();
        let (mut at, mut ns) = (0usize, 1usize);
        for r in radices(l) {
            let dst = buf - at;
            self.fft_stage(l, w, r, ns, at, dst, inverse);
            self.bar();
            ns *= r;
            at = dst;
        }
        at
    }

    /// The direct path's store: shared memory at `off` → global, scaled by `scale`.
    pub(super) fn fft_direct_store(
        &mut self,
        dst: &Direct,
        l: usize,
        w: usize,
        off: usize,
        scale: f32,
    ) {
        self.block_copy(dst, l, w, off, false, scale);
        self.bar();
    }

    /// Copies the `[l, w]` block at `acc`'s index between global memory and shared memory at
    /// byte offset `off` (`load`: global → shared, zeros out of bounds; else shared → global,
    /// out-of-bounds elements not written). Threads take consecutive elements.
    fn block_copy(&mut self, acc: &Direct, l: usize, w: usize, off: usize, load: bool, scale: f32) {
        let threads = self.w as usize * 32;
        let rank = self.k.params[acc.param].rank;
        let ptr = self.params[acc.param].ptr;
        let dims = self.params[acc.param].dims.clone();
        let idx: Vec<Reg> = acc.index.iter().map(|v| self.val(*v).regs[0]).collect();
        let e = self.a.r();
        self.a.i(format!("mov.u32 {e}, {}", self.tid));
        let (head, end) = (self.a.label("fftcp"), self.a.label("endfftcp"));
        let p = self.a.p();
        self.a.place(&head);
        self.a.i(format!("setp.ge.u32 {p}, {e}, {}", l * w));
        self.a.i(format!("@{p} bra {end}"));
        let (row, col) = (self.a.r(), self.a.r());
        self.a.i(format!("div.u32 {row}, {e}, {w}"));
        self.a.i(format!("rem.u32 {col}, {e}, {w}"));
        let lin = self.a.d();
        self.a.i(format!("mov.u64 {lin}, 0"));
        let mut preds = Vec::new();
        for ax in 0..rank {
            let coord = if ax + 2 == rank || ax + 1 == rank {
                let x = self.a.r();
                let add = if ax + 1 == rank { col } else { row };
                self.a.i(format!("add.s32 {x}, {}, {add}", idx[ax]));
                x
            } else {
                idx[ax]
            };
            preds.push(format!("setp.lt.u32 {{p}}, {coord}, {}", dims[ax]));
            let (t, c64) = (self.a.d(), self.a.d());
            self.a.i(format!("cvt.u64.u32 {t}, {}", dims[ax]));
            self.a.i(format!("cvt.u64.u32 {c64}, {coord}"));
            self.a.i(format!("mad.lo.u64 {lin}, {lin}, {t}, {c64}"));
        }
        let ok = self.and_all(preds);
        let addr = self.a.d();
        self.a.i(format!("mad.lo.u64 {addr}, {lin}, 4, {ptr}"));
        let sa = self.a.r();
        self.a
            .i(format!("mad.lo.u32 {sa}, {e}, 4, {}", self.smem_base));
        if off > 0 {
            self.a.i(format!("add.u32 {sa}, {sa}, {off}"));
        }
        let v = self.a.f();
        let guard = |s: String| match ok {
            Some(q) => format!("@{q} {s}"),
            None => s,
        };
        if load {
            self.a.i(format!("mov.f32 {v}, 0f00000000"));
            self.a.i(guard(format!("ld.global.f32 {v}, [{addr}]")));
            self.a.i(format!("st.shared.f32 [{sa}], {v}"));
        } else {
            self.a.i(format!("ld.shared.f32 {v}, [{sa}]"));
            if scale != 1.0 {
                self.a.i(format!("mul.rn.f32 {v}, {v}, {}", flit(scale)));
            }
            self.a.i(guard(format!("st.global.f32 [{addr}], {v}")));
        }
        self.a.i(format!("add.u32 {e}, {e}, {threads}"));
        self.a.i(format!("bra.uni {head}"));
        self.a.place(&end);
    }

    /// Emits `fft`/`ifft` of tile `x` (model `(L, W)`).
    pub(super) fn fft(&mut self, x: TValue, inverse: bool) -> Result<DVal, EmitError> {
        let (l, w) = match self.k.ty(x).shape.as_slice() {
            [l, w] => (*l, *w),
            _ => return Err(self.err("fft needs a rank-2 tile (verified)")),
        };
        let d = self.relayout(x, l, w)?;
        let buf = l * w * 4;
        self.need_smem(2 * buf);
        self.a.comment(format!(
            "{} of {} columns of length {l} (Stockham, stages {:?})",
            if inverse { "ifft" } else { "fft" },
            w / 2,
            radices(l)
        ));
        self.write_smem(&d, 0, false)?;
        self.bar();
        let (mut src, mut ns) = (0usize, 1usize);
        for r in radices(l) {
            let dst = buf - src;
            self.fft_stage(l, w, r, ns, src, dst, inverse);
            self.bar();
            ns *= r;
            src = dst;
        }
        let mut out = self.read_smem(DType::F32, l, w, src, false);
        self.bar();
        if inverse && l > 1 {
            let s = flit(1.0 / l as f32);
            for reg in out.regs.iter_mut() {
                let y = self.a.f();
                self.a.i(format!("mul.rn.f32 {y}, {reg}, {s}"));
                *reg = y;
            }
        }
        Ok(out)
    }

    /// One radix-`r` Stockham stage from byte offset `src` to `dst` (sub-transform size `ns`).
    #[allow(clippy::too_many_arguments)]
    fn fft_stage(
        &mut self,
        l: usize,
        w: usize,
        r: usize,
        ns: usize,
        src: usize,
        dst: usize,
        inverse: bool,
    ) {
        let cols = w / 2;
        let items = (l / r) * cols;
        let threads = self.w as usize * 32;
        self.a.comment(format!("radix-{r} stage, ns = {ns}"));
        let it = self.a.r();
        self.a.i(format!("mov.u32 {it}, {}", self.tid));
        let (head, end) = (self.a.label("fft"), self.a.label("endfft"));
        let p = self.a.p();
        self.a.place(&head);
        self.a.i(format!("setp.ge.u32 {p}, {it}, {items}"));
        self.a.i(format!("@{p} bra {end}"));
        // j = it / cols (butterfly), c = it % cols (complex column)
        let (j, c) = (self.a.r(), self.a.r());
        self.a.i(format!("div.u32 {j}, {it}, {cols}"));
        self.a.i(format!("rem.u32 {c}, {it}, {cols}"));
        // k = j mod ns; twiddle index m = k · L / (ns·r)
        let k = self.a.r();
        self.a.i(format!("and.b32 {k}, {j}, {}", ns - 1));
        let m = self.a.r();
        self.a.i(format!("mul.lo.u32 {m}, {k}, {}", l / (ns * r)));
        // element address of (row, column c) in a buffer: (row·W + 2c)·4 + base
        let col_bytes = self.a.r();
        self.a.i(format!("shl.b32 {col_bytes}, {c}, 3"));
        let mut v: Vec<(Reg, Reg)> = Vec::with_capacity(r);
        for q in 0..r {
            let row = self.a.r();
            self.a.i(format!("add.u32 {row}, {j}, {}", q * l / r));
            let addr = self.row_addr(row, w, col_bytes, src);
            let (re, im) = (self.a.f(), self.a.f());
            self.a
                .i(format!("ld.shared.v2.f32 {{{re}, {im}}}, [{addr}]"));
            v.push((re, im));
        }
        if ns > 1 {
            let w1 = self.twiddle(m, l, inverse);
            let mut wq = w1;
            for (q, vq) in v.iter_mut().enumerate().skip(1) {
                if q > 1 {
                    wq = self.cmul(wq, w1);
                }
                *vq = self.cmul(*vq, wq);
            }
        }
        let y = if r == 2 {
            vec![self.cadd(v[0], v[1]), self.csub(v[0], v[1])]
        } else {
            let (a0, a1) = (self.cadd(v[0], v[2]), self.csub(v[0], v[2]));
            let (b0, b1) = (self.cadd(v[1], v[3]), self.csub(v[1], v[3]));
            // forward: X1 = a1 − i·b1, X3 = a1 + i·b1 (inverse swaps them)
            let minus_ib = self.ctimes_i(b1, true);
            let plus_ib = self.ctimes_i(b1, false);
            let (x1, x3) = (self.cadd(a1, minus_ib), self.cadd(a1, plus_ib));
            let (x1, x3) = if inverse { (x3, x1) } else { (x1, x3) };
            vec![self.cadd(a0, b0), x1, self.csub(a0, b0), x3]
        };
        // destination row: (j − k)·r + k + q·ns
        let base = self.a.r();
        self.a.i(format!("sub.u32 {base}, {j}, {k}"));
        self.a.i(format!("mad.lo.u32 {base}, {base}, {r}, {k}"));
        for (q, (re, im)) in y.into_iter().enumerate() {
            let row = self.a.r();
            self.a.i(format!("add.u32 {row}, {base}, {}", q * ns));
            let addr = self.row_addr(row, w, col_bytes, dst);
            self.a
                .i(format!("st.shared.v2.f32 [{addr}], {{{re}, {im}}}"));
        }
        self.a.i(format!("add.u32 {it}, {it}, {threads}"));
        self.a.i(format!("bra.uni {head}"));
        self.a.place(&end);
    }

    fn row_addr(&mut self, row: Reg, w: usize, col_bytes: Reg, off: usize) -> Reg {
        let a = self.a.r();
        self.a
            .i(format!("mad.lo.u32 {a}, {row}, {}, {col_bytes}", w * 4));
        self.a.i(format!("add.u32 {a}, {a}, {}", self.smem_base));
        if off > 0 {
            self.a.i(format!("add.u32 {a}, {a}, {off}"));
        }
        a
    }

    /// `e^{∓2πi·m/l}` (`−` forward) for an integer `m` in `[0, l)`.
    fn twiddle(&mut self, m: Reg, l: usize, inverse: bool) -> (Reg, Reg) {
        // quadrant q = 4m / l and the remainder in [0, l/4): exact for l ≥ 4 (the only
        // lengths with ns > 1 stages)
        let q = self.a.r();
        let quarter = (l / 4).max(1);
        self.a.i(format!("div.u32 {q}, {m}, {quarter}"));
        let rem = self.a.r();
        self.a.i(format!("rem.u32 {rem}, {m}, {quarter}"));
        let x = self.a.f();
        self.a.i(format!("cvt.rn.f32.u32 {x}, {rem}"));
        let step = 2.0 * std::f64::consts::PI / l as f64;
        self.a
            .i(format!("mul.rn.f32 {x}, {x}, {}", flit(step as f32)));
        let x2 = self.a.f();
        self.a.i(format!("mul.rn.f32 {x2}, {x}, {x}"));
        // sin x = x·(1 − x²/3! + x⁴/5! − … − x¹⁰/11!), cos x = 1 − x²/2! + … + x¹²/12!
        let fact = |n: u32| (1..=n).map(f64::from).product::<f64>();
        let horner = |g: &mut Self, coefs: &[f64]| {
            let acc = g.a.f();
            g.a.i(format!(
                "mov.f32 {acc}, {}",
                flit(*coefs.last().unwrap() as f32)
            ));
            for c in coefs.iter().rev().skip(1) {
                g.a.i(format!(
                    "fma.rn.f32 {acc}, {acc}, {x2}, {}",
                    flit(*c as f32)
                ));
            }
            acc
        };
        let sin_c: Vec<f64> = (0..6)
            .map(|i| (-1f64).powi(i) / fact(2 * i as u32 + 1))
            .collect();
        let cos_c: Vec<f64> = (0..7)
            .map(|i| (-1f64).powi(i) / fact(2 * i as u32))
            .collect();
        let s = horner(self, &sin_c);
        self.a.i(format!("mul.rn.f32 {s}, {s}, {x}"));
        let c = horner(self, &cos_c);
        // rotate by q·π/2: (c, s) → (−s, c) → (−c, −s) → (s, −c)
        let (ns_, nc) = (self.a.f(), self.a.f());
        self.a.i(format!("neg.f32 {ns_}, {s}"));
        self.a.i(format!("neg.f32 {nc}, {c}"));
        let (p1, p2, p3) = (self.a.p(), self.a.p(), self.a.p());
        self.a.i(format!("setp.eq.u32 {p1}, {q}, 1"));
        self.a.i(format!("setp.eq.u32 {p2}, {q}, 2"));
        self.a.i(format!("setp.eq.u32 {p3}, {q}, 3"));
        let (cr, sr) = (self.a.f(), self.a.f());
        self.a.i(format!("mov.f32 {cr}, {c}"));
        self.a.i(format!("mov.f32 {sr}, {s}"));
        self.a.i(format!("@{p1} mov.f32 {cr}, {ns_}"));
        self.a.i(format!("@{p1} mov.f32 {sr}, {c}"));
        self.a.i(format!("@{p2} mov.f32 {cr}, {nc}"));
        self.a.i(format!("@{p2} mov.f32 {sr}, {ns_}"));
        self.a.i(format!("@{p3} mov.f32 {cr}, {s}"));
        self.a.i(format!("@{p3} mov.f32 {sr}, {nc}"));
        if !inverse {
            self.a.i(format!("neg.f32 {sr}, {sr}"));
        }
        (cr, sr)
    }

    fn cmul(&mut self, x: (Reg, Reg), y: (Reg, Reg)) -> (Reg, Reg) {
        // re = x.re·y.re − x.im·y.im, im = x.re·y.im + x.im·y.re
        let (t, re, im) = (self.a.f(), self.a.f(), self.a.f());
        self.a.i(format!("mul.rn.f32 {t}, {}, {}", x.1, y.1));
        self.a.i(format!("neg.f32 {t}, {t}"));
        self.a.i(format!("fma.rn.f32 {re}, {}, {}, {t}", x.0, y.0));
        self.a.i(format!("mul.rn.f32 {im}, {}, {}", x.0, y.1));
        self.a.i(format!("fma.rn.f32 {im}, {}, {}, {im}", x.1, y.0));
        (re, im)
    }

    fn cadd(&mut self, x: (Reg, Reg), y: (Reg, Reg)) -> (Reg, Reg) {
        let (re, im) = (self.a.f(), self.a.f());
        self.a.i(format!("add.rn.f32 {re}, {}, {}", x.0, y.0));
        self.a.i(format!("add.rn.f32 {im}, {}, {}", x.1, y.1));
        (re, im)
    }

    fn csub(&mut self, x: (Reg, Reg), y: (Reg, Reg)) -> (Reg, Reg) {
        let (re, im) = (self.a.f(), self.a.f());
        self.a.i(format!("sub.rn.f32 {re}, {}, {}", x.0, y.0));
        self.a.i(format!("sub.rn.f32 {im}, {}, {}", x.1, y.1));
        (re, im)
    }

    /// `−i·x` when `minus`, else `i·x`.
    fn ctimes_i(&mut self, x: (Reg, Reg), minus: bool) -> (Reg, Reg) {
        let n = self.a.f();
        if minus {
            // −i·(a + ib) = b − ia
            self.a.i(format!("neg.f32 {n}, {}", x.0));
            (x.1, n)
        } else {
            // i·(a + ib) = −b + ia
            self.a.i(format!("neg.f32 {n}, {}", x.1));
            (n, x.0)
        }
    }
}
