//! Algebraic rewrites over Graph IR, applied to a fixed point before fusion (seeds §7.4).
//!
//! A [`Rule`] is data: a **pattern** (a `match` over the op table that recognises the rule's
//! shape at a root value and captures its inputs), a **legality** check (may the matched
//! values be replaced? e.g. no intermediate has another use), a **cost guard** (the work of
//! the matched nodes as the fusion would run them, and of the replacement, timed on a
//! roofline: the rule applies only when the replacement is faster) and a **replacement**
//! builder. [`rewrite`] runs every enabled rule to a fixed point and records each decision —
//! applied or not, with the matched values and both estimates — as an [`Applied`]; the
//! compiler prints them at the head of the fusion trace (`TESSERA_DUMP=fusion`).
//!
//! Rules ([`RULES`]):
//! - `flash_attention`: `softmax(scale · q·kᵀ [causal_mask]) [cast] · v` → one `attention`
//!   node (lowered to one online-softmax kernel; the `[Sq, Sk]` scores never reach memory);
//! - `spectral_conv`: `conv2d` → `ifft(fft(x) ⊙ conj(fft(w)))` with zero padding and a crop,
//!   when the roofline says the transforms cost less than the direct convolution (large kernels).
//!
//! After the rules, axis legalisation always runs (no option turns it off; its records are
//! `softmax_axis` and `reduce_axes`): a softmax along an inner axis becomes
//! `permute` → softmax along the last axis → `permute` back, and a reduction over several
//! axes one reduction per axis.
//!
//! A kernel switches a rule off with `#[kernel(rewrites(flash_attention = false))]`
//! ([`RewriteOptions::disabled`]), for debugging and A/B timing.
//!
//! ```
//! use tessera_ir::rewrite::{RewriteOptions, rewrite};
//! let g = tessera_ir::graph::parse("graph @attn(%q: f32[S, 64], %k: f32[S, 64], %v: f32[S, 64]) -> f32[S, 64] {
//!   %3 = transpose %k : f32[64, S]
//!   %4 = matmul %q, %3 : f32[S, S]
//!   %5 = const 0.125 : f32[]
//!   %6 = mul %4, %5 : f32[S, S]
//!   %7 = softmax %6 : f32[S, S]
//!   %8 = matmul %7, %v : f32[S, 64]
//!   return %8
//! }").unwrap();
//! let (out, trace) = rewrite(&g, &RewriteOptions::default()).unwrap();
//! assert!(out.to_string().contains("attention %q, %k, %v scale=0.125 causal=false"));
//! assert!(trace[0].applied && trace[0].rule == "flash_attention");
//! ```

mod attention;
mod axes;
pub(crate) mod edit;

pub use axes::{axis_back, axis_last};
mod spectral;

use crate::cost::Arch;
use crate::cost::graph::{Sizes, Work};
use crate::graph::{Graph, GraphBuilder, Op, TypeError, Value};
use std::fmt;

/// A rewrite rule: pattern, legality, cost guard and replacement, as plain functions over the
/// op table.
pub struct Rule {
    /// The name `#[kernel(rewrites(name = false))]` uses.
    pub name: &'static str,
    /// One line for the trace and the docs.
    pub summary: &'static str,
    /// Recognises the rule's shape with its root at a value.
    pub pattern: fn(&Graph, Value) -> Option<Match>,
    /// `Err(reason)` when the matched values may not be replaced.
    pub legal: fn(&Graph, &Match) -> Result<(), String>,
    /// The work of the matched nodes as fused kernels would run them, and of the replacement.
    pub cost: fn(&Graph, &Match, &Sizes) -> (Work, Work),
    /// Builds the replacement from the (renumbered) inputs; returns the value replacing the root.
    pub replace: fn(&mut GraphBuilder, &Match, &[Value]) -> Result<Value, TypeError>,
}

/// What a pattern matched: the root, every node the replacement subsumes, the inputs it keeps,
/// and the op that carries the match's attributes (the replacement's op, or the matched root's).
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    /// The node the replacement takes the place of.
    pub root: Value,
    /// The matched nodes, root last.
    pub nodes: Vec<Value>,
    /// The values the replacement reads.
    pub inputs: Vec<Value>,
    /// The op carrying the match's attributes.
    pub op: Op,
}

/// Every rule, in the order the driver tries them.
pub const RULES: &[Rule] = &[attention::FLASH_ATTENTION, spectral::SPECTRAL_CONV];

/// Looks a rule up by name.
pub fn rule(name: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.name == name)
}

/// The names of every rule.
pub fn rule_names() -> Vec<&'static str> {
    RULES.iter().map(|r| r.name).collect()
}

/// Options of one rewrite run.
#[derive(Clone, Debug, PartialEq)]
pub struct RewriteOptions {
    /// Rules switched off (by name): `#[kernel(rewrites(name = false))]`.
    pub disabled: Vec<String>,
    /// Rules applied wherever they are legal, whatever the cost guard says (by name):
    /// `#[kernel(rewrites(name = true))]`, for A/B timing and tests.
    pub forced: Vec<String>,
    /// Extents of symbols the cost guards do not know.
    pub sizes: Sizes,
    /// The machine whose roofline the cost guards use.
    pub arch: Arch,
}

impl Default for RewriteOptions {
    /// Every rule on; symbols estimated at 256; the H100 roofline.
    fn default() -> Self {
        RewriteOptions {
            disabled: Vec::new(),
            forced: Vec::new(),
            sizes: Sizes::nominal(256),
            arch: Arch::H100,
        }
    }
}

impl RewriteOptions {
    /// These options with the named rules switched off; an unknown name is an error naming it.
    ///
    /// ```
    /// let o = tessera_ir::rewrite::RewriteOptions::default().disable(&["flash_attention"]).unwrap();
    /// assert_eq!(o.disabled, vec!["flash_attention"]);
    /// let e = tessera_ir::rewrite::RewriteOptions::default().disable(&["flash"]).unwrap_err();
    /// assert!(e.contains("unknown rewrite rule `flash`"));
    /// ```
    pub fn disable(mut self, names: &[&str]) -> Result<Self, String> {
        for n in names {
            known(n)?;
            self.disabled.push(n.to_string());
        }
        Ok(self)
    }

    /// These options with the named rules applied wherever legal, whatever the cost guard says.
    ///
    /// ```
    /// let o = tessera_ir::rewrite::RewriteOptions::default().force(&["spectral_conv"]).unwrap();
    /// assert_eq!(o.forced, vec!["spectral_conv"]);
    /// ```
    pub fn force(mut self, names: &[&str]) -> Result<Self, String> {
        for n in names {
            known(n)?;
            self.forced.push(n.to_string());
        }
        Ok(self)
    }

    fn enabled(&self, r: &Rule) -> bool {
        !self.disabled.iter().any(|d| d == r.name)
    }
}

fn known(n: &str) -> Result<(), String> {
    match rule(n) {
        Some(_) => Ok(()),
        None => Err(format!(
            "unknown rewrite rule `{n}`; the rules are {}",
            rule_names().join(", ")
        )),
    }
}

/// One decision of the driver: a rule matched at `root`; it was applied, or kept out with a
/// reason. Value names refer to the graph the rule saw.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    /// The rule's name (`flash_attention`, ...).
    pub rule: &'static str,
    /// The matched root.
    pub root: String,
    /// The matched nodes.
    pub matched: Vec<String>,
    /// The values the replacement would read.
    pub inputs: Vec<String>,
    /// Estimates of the matched nodes (as fused kernels) and of the replacement; `None` when
    /// the legality check failed first.
    pub before: Option<Work>,
    /// See `before`.
    pub after: Option<Work>,
    /// Roofline times of `before` and `after`, seconds.
    pub times: Option<(f64, f64)>,
    /// True when the graph was rewritten.
    pub applied: bool,
    /// Applied because the options force the rule, although the cost model disagreed.
    pub forced: bool,
    /// Why it was not applied.
    pub reason: Option<String>,
    /// The arch whose roofline timed the estimates.
    pub arch: &'static str,
    /// The extent unbound symbols were estimated at.
    pub nominal: u64,
}

impl fmt::Display for Applied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match (self.applied, self.forced) {
            (true, true) => "applied (forced)",
            (true, false) => "applied",
            _ => "not applied",
        };
        write!(
            f,
            "rewrite {} at {} [{}] ({}): {verdict}",
            self.rule,
            self.root,
            self.matched.join(", "),
            self.inputs.join(", ")
        )?;
        match &self.reason {
            Some(r) if self.applied => write!(f, ": {r}")?,
            Some(r) => write!(f, " because {r}")?,
            None => {}
        }
        if let (Some(b), Some(a), Some((tb, ta))) = (self.before, self.after, self.times) {
            write!(
                f,
                "; before {} in {}, after {} in {}; saves {} and {} (roofline of {}, symbols at {})",
                work(&b),
                time(tb),
                work(&a),
                time(ta),
                bytes(b.bytes - a.bytes),
                flops(b.flops - a.flops),
                self.arch,
                self.nominal
            )?;
        }
        Ok(())
    }
}

fn work(w: &Work) -> String {
    format!("{} / {}", bytes(w.bytes), flops(w.flops))
}

fn scaled(x: f64, unit: &str) -> String {
    let (v, p) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(s, _)| x.abs() >= *s)
        .unwrap_or((1.0, ""));
    format!("{:.3} {p}{unit}", x / v)
}

fn bytes(x: f64) -> String {
    scaled(x, "B")
}

fn flops(x: f64) -> String {
    scaled(x, "FLOP")
}

fn time(s: f64) -> String {
    if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.3} µs", s * 1e6)
    }
}

/// Why a rewrite failed: a rule built a replacement of the wrong type (a compiler bug).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rewrite {rule} at {value}: {message}")]
pub struct RewriteError {
    /// The rule's name.
    pub rule: String,
    /// The root it was applied at.
    pub value: String,
    /// The type mismatch, in words.
    pub message: String,
}

/// Runs every enabled rule to a fixed point. Returns the rewritten graph and the decisions.
///
/// Each pass matches every rule at every node of the current graph, applies the accepted
/// matches that do not overlap, and rebuilds the graph (dead nodes removed); it stops when a
/// pass applies nothing. The decisions are those applied in every pass plus the final pass's
/// rejections.
pub fn rewrite(g: &Graph, opts: &RewriteOptions) -> Result<(Graph, Vec<Applied>), RewriteError> {
    let mut g = g.clone();
    let mut trace = Vec::new();
    // Every application removes at least one node; the bound only guards against a rule bug.
    for _ in 0..=g.nodes.len() {
        let mut accepted: Vec<(&Rule, Match)> = Vec::new();
        let mut rejected = Vec::new();
        for i in 0..g.nodes.len() {
            let v = Value(i as u32);
            for r in RULES.iter().filter(|r| opts.enabled(r)) {
                let Some(m) = (r.pattern)(&g, v) else {
                    continue;
                };
                let mut rec = Applied {
                    rule: r.name,
                    root: g.value_name(m.root),
                    matched: m.nodes.iter().map(|n| g.value_name(*n)).collect(),
                    inputs: m.inputs.iter().map(|n| g.value_name(*n)).collect(),
                    before: None,
                    after: None,
                    times: None,
                    applied: false,
                    forced: false,
                    reason: None,
                    arch: opts.arch.name,
                    nominal: opts.sizes.nominal,
                };
                if let Err(why) = (r.legal)(&g, &m) {
                    rec.reason = Some(why);
                    rejected.push(rec);
                    continue;
                }
                let (before, after) = (r.cost)(&g, &m, &opts.sizes);
                rec.before = Some(before);
                rec.after = Some(after);
                let (tb, ta) = (before.time(&opts.arch), after.time(&opts.arch));
                rec.times = Some((tb, ta));
                if ta >= tb {
                    if opts.forced.iter().any(|f| f == r.name) {
                        rec.forced = true;
                    } else {
                        rec.reason = Some(format!(
                            "the cost model prefers the original ({} ≤ {})",
                            time(tb),
                            time(ta)
                        ));
                        rejected.push(rec);
                        continue;
                    }
                }
                let overlaps = accepted
                    .iter()
                    .any(|(_, a)| a.nodes.iter().any(|n| m.nodes.contains(n)));
                if overlaps {
                    continue;
                }
                rec.applied = true;
                trace.push(rec);
                accepted.push((r, m));
            }
        }
        if accepted.is_empty() {
            trace.extend(rejected);
            let (g, notes) = axes::legalize(&g)?;
            trace.extend(notes);
            return Ok((g, trace));
        }
        g = edit::apply(&g, &accepted)?;
    }
    Err(RewriteError {
        rule: "(driver)".into(),
        value: g.name.clone(),
        message: "the rules did not reach a fixed point".into(),
    })
}

/// True when `v` is used exactly once in `g` (by a node or as the output).
pub(crate) fn single_use(g: &Graph, v: Value) -> bool {
    g.use_counts()[v.index()] == 1
}

#[cfg(test)]
mod tests;
