//! Loop-carried tiles updated in place: a loop whose body computes the next value of a
//! carried tile in one group (`acc = acc + x · w`, the depthwise convolution's taps) writes
//! that value straight into the carried tile's materialised slot, instead of into a slot of
//! its own that the loop's yield then copies back (`Copy::Mat`) at every iteration.
//!
//! Sound when, in the loop body, the carried tile is read only by that group, at the
//! group's own position (not broadcast) and only by members up to the one producing the next
//! value: each chunk is read there before it is overwritten, and nothing reads it later in
//! the iteration.

use super::plan::{COp, Copy, Member, Src, Step};
use super::uses::mat_uses;

/// Rewrites every loop (nested ones included) whose carried tile qualifies.
pub(crate) fn fuse(mut steps: Vec<Step>) -> Vec<Step> {
    let uses = mat_uses(&steps);
    walk(&mut steps, &uses);
    steps
}

fn walk(steps: &mut [Step], uses: &std::collections::HashMap<usize, usize>) {
    for s in steps.iter_mut() {
        let Step::For { body, yields, .. } = s else {
            continue;
        };
        walk(body, uses);
        yields.retain(|y| {
            let Copy::Mat(next, acc, n) = *y else {
                return true;
            };
            !(uses.get(&next) == Some(&2) && redirect(body, next, acc, n))
        });
    }
}

/// Points the member producing `next` at `acc` when that is sound (see the module docs).
fn redirect(body: &mut [Step], next: usize, acc: usize, n: usize) -> bool {
    let mut at = None;
    for (p, s) in body.iter().enumerate() {
        if let Step::Group(g) = s
            && let Some(q) = g.members.iter().position(|m| m.mat == Some(next))
        {
            at = Some((p, q));
        }
    }
    let Some((p, q)) = at else {
        return false;
    };
    // No other step of the body references `acc`.
    let others: Vec<Step> = body
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != p)
        .map(|(_, s)| s.clone())
        .collect();
    if mat_uses(&others).contains_key(&acc) {
        return false;
    }
    let Step::Group(g) = &mut body[p] else {
        return false;
    };
    if g.rows * g.cols != n {
        return false;
    }
    let (rows, cols) = (g.rows, g.cols);
    let reads_at_position = |m: &Member| {
        let mut ok = true;
        let mut see = |s: &Src| {
            if let Src::Mat {
                off,
                rows: r,
                cols: c,
            } = s
                && *off == acc
            {
                ok &= (*r, *c) == (rows, cols);
                return true;
            }
            false
        };
        let read = match &m.op {
            COp::Store { src: a, .. } | COp::Unary { a, .. } | COp::Cast { a, .. } => see(a),
            COp::Binary { a, b, .. } | COp::Cmp { a, b, .. } => see(a) | see(b),
            COp::Select { m, a, b, .. } => see(m) | see(a) | see(b),
            COp::Reduce { a, out, .. } => see(a) | (*out == acc),
            COp::Load { .. } | COp::Full { .. } | COp::Arange { .. } => false,
        };
        (read, ok && m.mat != Some(acc))
    };
    for (i, m) in g.members.iter().enumerate() {
        let (read, ok) = reads_at_position(m);
        if !ok || (read && i > q) || matches!(m.op, COp::Reduce { .. }) && read {
            return false;
        }
    }
    g.members[q].mat = Some(acc);
    true
}

#[cfg(test)]
mod tests {
    use super::super::plan::{Step, compile};
    use tessera_ir::tile::parse;

    /// The yield copies left in the plan's top-level loop when its body (which reads `%x` at
    /// the loop counter into `%6` and carries `%5`) is `body`.
    fn yields(body: &str) -> usize {
        let text = format!(
            "kernel @k(%x: f32<2>, %y: f32<2>) grid=[1, 1, 1] {{
  %0 = const 0.0 : i32
  %1 = dim %x, 0 : i32
  %2 = full 0.0 : f32[16, 64]
  %3 = for %4 = %0 to %1 step 16 iter(%5: f32[16, 64] = %2) {{
    %6 = load %x[%4, %0] : f32[16, 64]
{body}  }}
  store %y[%0, %0], %3
}}
"
        );
        let k = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let plan = compile(&k).unwrap();
        let n = plan.steps.iter().find_map(|s| match s {
            Step::For { yields, .. } => Some(yields.len()),
            _ => None,
        });
        n.expect("a loop")
    }

    #[test]
    fn an_accumulator_updated_elementwise_is_written_in_place() {
        let body =
            "    %7 = mul %6, %6 : f32[16, 64]\n    %8 = add %5, %7 : f32[16, 64]\n    yield %8\n";
        assert_eq!(yields(body), 0);
    }

    #[test]
    fn an_accumulator_read_after_its_update_keeps_its_copy() {
        // `%9` reads the old `%5` after `%8` (the new value) is computed.
        let body = "    %7 = mul %6, %6 : f32[16, 64]\n    %8 = add %5, %7 : f32[16, 64]\n    %9 = add %8, %5 : f32[16, 64]\n    store %y[%4, %0], %9\n    yield %8\n";
        assert_eq!(yields(body), 1);
    }
}
