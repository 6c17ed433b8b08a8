//! How often a plan's steps reference each materialised tile: a rewrite into a direct kernel
//! ([`super::transpose`], [`super::colreduce`]) may drop a tile only its own steps read.

use super::plan::{COp, Copy, Src, Step};
use std::collections::HashMap;

/// Per materialised offset, how many references `steps` make to it (operands, results,
/// copies, transposes; loop bodies included).
pub(crate) fn mat_uses(steps: &[Step]) -> HashMap<usize, usize> {
    let mut n = HashMap::new();
    count(steps, &mut n);
    n
}

fn add(o: usize, n: &mut HashMap<usize, usize>) {
    *n.entry(o).or_insert(0) += 1;
}

fn src(s: &Src, n: &mut HashMap<usize, usize>) {
    if let Src::Mat { off, .. } = s {
        add(*off, n);
    }
}

fn copy(c: &Copy, n: &mut HashMap<usize, usize>) {
    if let Copy::Mat(a, b, _) = c {
        add(*a, n);
        add(*b, n);
    }
}

fn count(steps: &[Step], n: &mut HashMap<usize, usize>) {
    for s in steps {
        match s {
            Step::Scalar { .. } | Step::Transpose(_) => {}
            Step::Group(g) => {
                for m in &g.members {
                    if let Some(o) = m.mat {
                        add(o, n);
                    }
                    match &m.op {
                        COp::Store { src: a, .. } | COp::Unary { a, .. } | COp::Cast { a, .. } => {
                            src(a, n)
                        }
                        COp::Binary { a, b, .. } | COp::Cmp { a, b, .. } => {
                            src(a, n);
                            src(b, n);
                        }
                        COp::Select { m, a, b, .. } => {
                            src(m, n);
                            src(a, n);
                            src(b, n);
                        }
                        COp::Reduce { a, out, .. } => {
                            src(a, n);
                            add(*out, n);
                        }
                        COp::Load { .. } | COp::Full { .. } | COp::Arange { .. } => {}
                    }
                }
            }
            Step::Trans { src, dst, .. } => {
                add(*src, n);
                add(*dst, n);
            }
            Step::For {
                inits,
                body,
                yields,
                ..
            } => {
                inits.iter().chain(yields).for_each(|c| copy(c, n));
                count(body, n);
            }
            Step::ColReduce(c) => {
                add(c.init, n);
                add(c.acc, n);
                add(c.part, n);
            }
        }
    }
}
