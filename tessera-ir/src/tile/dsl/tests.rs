//! Lowering tests: programs built with a small AST builder, checked against the Tile IR text.

use super::*;
use crate::tile::{self, Kernel};

/// Hands out node ids while building an AST by hand.
#[derive(Default)]
struct Ast {
    next: NodeId,
}

impl Ast {
    fn id(&mut self) -> NodeId {
        self.next += 1;
        self.next
    }
    fn e(&mut self, kind: ExprKind) -> Expr {
        Expr::new(self.id(), kind)
    }
    fn int(&mut self, v: i64) -> Expr {
        self.e(ExprKind::Int(v))
    }
    fn float(&mut self, v: f64) -> Expr {
        self.e(ExprKind::Float(v))
    }
    fn var(&mut self, n: &str) -> Expr {
        self.e(ExprKind::Var(n.into()))
    }
    fn call(&mut self, f: &str, args: Vec<Expr>) -> Expr {
        self.e(ExprKind::Call {
            func: f.into(),
            ty: None,
            args,
            named: vec![],
        })
    }
    fn call_ty(&mut self, f: &str, ty: DType, args: Vec<Expr>) -> Expr {
        self.e(ExprKind::Call {
            func: f.into(),
            ty: Some(ty),
            args,
            named: vec![],
        })
    }
    fn call_named(&mut self, f: &str, args: Vec<Expr>, named: Vec<(&str, Expr)>) -> Expr {
        let named = named.into_iter().map(|(n, e)| (n.to_string(), e)).collect();
        self.e(ExprKind::Call {
            func: f.into(),
            ty: None,
            args,
            named,
        })
    }
    fn list(&mut self, items: Vec<Expr>) -> Expr {
        self.e(ExprKind::List(items))
    }
    fn bin(&mut self, op: BinOp, a: Expr, b: Expr) -> Expr {
        self.e(ExprKind::Binary(op, Box::new(a), Box::new(b)))
    }
    fn neg(&mut self, a: Expr) -> Expr {
        self.e(ExprKind::Unary(UnOp::Neg, Box::new(a)))
    }
    fn let_(&mut self, n: &str, mutable: bool, value: Expr) -> Stmt {
        Stmt::new(
            self.id(),
            StmtKind::Let {
                name: n.into(),
                mutable,
                value,
            },
        )
    }
    fn assign(&mut self, n: &str, value: Expr) -> Stmt {
        Stmt::new(
            self.id(),
            StmtKind::Assign {
                name: n.into(),
                value,
            },
        )
    }
    fn expr(&mut self, e: Expr) -> Stmt {
        Stmt::new(self.id(), StmtKind::Expr(e))
    }
    fn for_(&mut self, var: &str, iter: Expr, body: Vec<Stmt>) -> Stmt {
        Stmt::new(
            self.id(),
            StmtKind::For {
                var: var.into(),
                iter,
                body,
            },
        )
    }
    /// `x.dim(axis)`
    fn dim(&mut self, x: &str, axis: i64) -> Expr {
        let (x, a) = (self.var(x), self.int(axis));
        self.call("dim", vec![x, a])
    }
    /// `cdiv(x.dim(axis), tile)`
    fn cdiv(&mut self, x: &str, axis: i64, tile: &str) -> Expr {
        let (d, t) = (self.dim(x, axis), self.var(tile));
        self.call("cdiv", vec![d, t])
    }
    fn param(&mut self, n: &str, access: Access, dtype: DType, rank: usize) -> ParamDecl {
        ParamDecl {
            id: self.id(),
            name: n.into(),
            access,
            dtype,
            rank,
        }
    }
    fn knob(&mut self, n: &str, v: i64) -> Knob {
        Knob {
            id: self.id(),
            name: n.into(),
            default: Some(v),
        }
    }
    /// `[a, b]` of variable names or integer literals.
    fn names(&mut self, items: &[&str]) -> Expr {
        let es = items.iter().map(|s| match s.parse::<i64>() {
            Ok(v) => self.int(v),
            Err(_) => self.var(s),
        });
        let es = es.collect();
        self.list(es)
    }
}

/// The tiled matmul of the `tile!` docs.
fn matmul(a: &mut Ast) -> Program {
    let knobs = vec![a.knob("BM", 64), a.knob("BN", 64), a.knob("BK", 32)];
    let params = vec![
        a.param("a", Access::In, DType::F32, 2),
        a.param("b", Access::In, DType::F32, 2),
        a.param("c", Access::Out, DType::F32, 2),
    ];
    let grid = vec![a.cdiv("a", 0, "BM"), a.cdiv("b", 1, "BN"), a.int(1)];
    let mut body = vec![];
    for (n, axis, t) in [("i", 0, "BM"), ("j", 1, "BN")] {
        let (ax, tv) = (a.int(axis), a.var(t));
        let pid = a.call("program_id", vec![ax]);
        let prod = a.bin(BinOp::Mul, pid, tv);
        body.push(a.let_(n, false, prod));
    }
    let shape = a.names(&["BM", "BN"]);
    let z = a.call_ty("zeros", DType::F32, vec![shape]);
    body.push(a.let_("acc", true, z));
    let (x, ik, sa) = (a.var("a"), a.names(&["i", "k"]), a.names(&["BM", "BK"]));
    let la = a.call("load", vec![x, ik, sa]);
    let (y, kj, sb) = (a.var("b"), a.names(&["k", "j"]), a.names(&["BK", "BN"]));
    let lb = a.call("load", vec![y, kj, sb]);
    let acc = a.var("acc");
    let d = a.call("dot", vec![la, lb, acc]);
    let step = a.assign("acc", d);
    let (lo, hi, st) = (a.int(0), a.dim("a", 1), a.var("BK"));
    let range = a.call("range", vec![lo, hi, st]);
    body.push(a.for_("k", range, vec![step]));
    let (c, ij, acc) = (a.var("c"), a.names(&["i", "j"]), a.var("acc"));
    let st = a.call("store", vec![c, ij, acc]);
    body.push(a.expr(st));
    Program {
        id: 0,
        name: "matmul_tiled".into(),
        knobs,
        params,
        grid,
        body,
    }
}

fn lowered(p: &Program, knobs: &[(&str, i64)]) -> Kernel {
    let k = lower(p, knobs).unwrap_or_else(|e| panic!("lowering failed at node {}: {e}", e.span));
    tile::verify(&k).unwrap();
    k
}

fn err(p: &Program) -> DslError {
    lower(p, &[]).expect_err("lowering should fail")
}

#[test]
fn matmul_lowers_to_a_loop_carrying_the_accumulator() {
    let k = lowered(&matmul(&mut Ast::default()), &[]);
    let text = k.to_string();
    let expected = "\
kernel @matmul_tiled(%a: f32<2>, %b: f32<2>, %c: f32<2>) grid=[cdiv(dim(%a, 0), 64), cdiv(dim(%b, 1), 64), 1] {
  %0 = program_id 0 : i32
  %1 = const 64.0 : i32
  %2 = mul %0, %1 : i32
  %3 = program_id 1 : i32
  %4 = const 64.0 : i32
  %5 = mul %3, %4 : i32
  %6 = full 0.0 : f32[64, 64]
  %7 = const 0.0 : i32
  %8 = dim %a, 1 : i32
  %14 = for %9 = %7 to %8 step 32 iter(%10: f32[64, 64] = %6) {
    %11 = load %a[%2, %9] : f32[64, 32]
    %12 = load %b[%9, %5] : f32[32, 64]
    %13 = dot %11, %12, %10 : f32[64, 64]
    yield %13
  }
  store %c[%2, %5], %14
}
";
    assert_eq!(text, expected, "got:\n{text}");
    assert_eq!(
        tile::parse(&text).unwrap(),
        k,
        "the lowered kernel round-trips through its text"
    );
}

#[test]
fn knobs_override_defaults() {
    let k = lowered(&matmul(&mut Ast::default()), &[("BM", 16), ("BK", 8)]);
    let text = k.to_string();
    assert!(
        text.contains("grid=[cdiv(dim(%a, 0), 16), cdiv(dim(%b, 1), 64), 1]"),
        "{text}"
    );
    assert!(text.contains("load %a[%2, %9] : f32[16, 8]"), "{text}");
    assert!(text.contains("step 8"), "{text}");
    let e = lower(&matmul(&mut Ast::default()), &[("BQ", 1)]).unwrap_err();
    assert_eq!(e.message, "unknown knob `BQ` (knobs: BM, BN, BK)");
}

/// Row softmax: `x: In<f32, 2>`, one row per program, masked columns read `-inf`.
fn softmax(a: &mut Ast, carried_scalar: bool) -> Program {
    let knobs = vec![a.knob("BN", 128)];
    let params = vec![
        a.param("x", Access::In, DType::F32, 2),
        a.param("y", Access::Out, DType::F32, 2),
    ];
    let grid = vec![a.dim("x", 0)];
    let mut body = vec![];
    let z = a.int(0);
    let pid = a.call("program_id", vec![z]);
    body.push(a.let_("row", false, pid));
    let bn = a.var("BN");
    let ar = a.call("arange", vec![bn]);
    body.push(a.let_("cols", false, ar));
    let (cols, n) = (a.var("cols"), a.dim("x", 1));
    let m = a.bin(BinOp::Lt, cols, n);
    body.push(a.let_("mask", false, m));
    let (x, idx, shape, mask, inf) = (
        a.var("x"),
        a.names(&["row", "0"]),
        a.names(&["BN"]),
        a.var("mask"),
        a.var("inf"),
    );
    let other = a.neg(inf);
    let ld = a.call_named(
        "load",
        vec![x, idx, shape],
        vec![("mask", mask), ("other", other)],
    );
    body.push(a.let_("v", false, ld));
    let (v, zero) = (a.var("v"), a.int(0));
    let mx = a.call("max", vec![v, zero]);
    body.push(a.let_("m", false, mx));
    let (v, m) = (a.var("v"), a.var("m"));
    let sub = a.bin(BinOp::Sub, v, m);
    let ex = a.call("exp", vec![sub]);
    body.push(a.let_("e", false, ex));
    let (e, zero) = (a.var("e"), a.int(0));
    let s = a.call("sum", vec![e, zero]);
    body.push(a.let_("s", false, s));
    if carried_scalar {
        // A scalar accumulator carried through a loop that adds 1.0 twice: `s` must stay f32.
        let init = a.float(0.0);
        body.push(a.let_("t", true, init));
        let (t, one) = (a.var("t"), a.float(1.0));
        let add = a.bin(BinOp::Add, t, one);
        let upd = a.assign("t", add);
        let (lo, hi) = (a.int(0), a.int(2));
        let r = a.call("range", vec![lo, hi]);
        body.push(a.for_("q", r, vec![upd]));
        let (s, t) = (a.var("s"), a.var("t"));
        let s2 = a.bin(BinOp::Mul, s, t);
        body.push(a.let_("s", false, s2));
    }
    let (mask, e, s) = (a.var("mask"), a.var("e"), a.var("s"));
    let div = a.bin(BinOp::Div, e, s);
    let zero = a.float(0.0);
    let sel = a.call("where_", vec![mask, div, zero]);
    let (y, idx, mask) = (a.var("y"), a.names(&["row", "0"]), a.var("mask"));
    let st = a.call_named("store", vec![y, idx, sel], vec![("mask", mask)]);
    body.push(a.expr(st));
    Program {
        id: 0,
        name: "softmax_rows".into(),
        knobs,
        params,
        grid,
        body,
    }
}

#[test]
fn softmax_uses_masks_reductions_and_select() {
    let k = lowered(&softmax(&mut Ast::default(), false), &[]);
    let text = k.to_string();
    for needle in [
        "grid=[cdiv(dim(%x, 0), 1), 1, 1]",
        "%1 = arange : i32[128]",
        "%3 = cmp.lt %1, %2 : bool[128]",
        "%5 = load %x[%0, %4] mask %3 other -inf : f32[128]",
        "%6 = reduce.max %5 axis=0 policy=fast : f32",
        "%7 = sub %5, %6 : f32[128]",
        "%8 = exp %7 : f32[128]",
        "%9 = reduce.sum %8 axis=0 policy=fast : f32",
        "%11 = div %8, %9 : f32[128]",
        "%12 = const 0.0 : f32",
        "%13 = select %3, %11, %12 : f32[128]",
        "store %y[%0, %10], %13 mask %3",
    ] {
        assert!(text.contains(needle), "missing `{needle}` in\n{text}");
    }
}

#[test]
fn scalar_literals_carried_through_loops_are_materialized_once() {
    let k = lowered(&softmax(&mut Ast::default(), true), &[]);
    let text = k.to_string();
    assert!(text.contains("iter(%"), "{text}");
    assert!(
        text.contains(": f32 = "),
        "the carried scalar is an f32: {text}"
    );
}

#[test]
fn carried_value_must_keep_its_type() {
    let mut a = Ast::default();
    let mut p = matmul(&mut a);
    // acc = dot(..).cast::<bf16>() changes the carried type.
    let StmtKind::For { body, .. } = &mut p.body[3].kind else {
        panic!()
    };
    let StmtKind::Assign { value, .. } = &mut body[0].kind else {
        panic!()
    };
    let inner = value.clone();
    *value = a.call_ty("cast", DType::BF16, vec![inner]);
    let span = body[0].id;
    let e = err(&p);
    assert_eq!(e.span, span);
    assert_eq!(
        e.message,
        "`acc` is carried through the loop as f32[64, 64] but is assigned bf16[64, 64] here"
    );
}

#[test]
fn front_end_errors_name_the_node() {
    // Each case edits the matmul program and expects (node, message).
    let cases: Vec<(&str, Box<dyn Fn(&mut Ast, &mut Program) -> NodeId>, &str)> = vec![
        (
            "unknown function",
            Box::new(|a, p| {
                let x = a.var("acc");
                let c = a.call("frobnicate", vec![x]);
                let id = c.id;
                p.body.push(a.expr(c));
                id
            }),
            "unknown function `frobnicate`",
        ),
        (
            "wrong arity",
            Box::new(|a, p| {
                let x = a.int(0);
                let y = a.int(1);
                let c = a.call("program_id", vec![x, y]);
                let id = c.id;
                p.body.push(a.expr(c));
                id
            }),
            "`program_id` takes 1 argument, got 2",
        ),
        (
            "store to In",
            Box::new(|a, p| {
                let (x, idx, v) = (a.var("a"), a.names(&["i", "j"]), a.var("acc"));
                let id = x.id;
                let c = a.call("store", vec![x, idx, v]);
                p.body.push(a.expr(c));
                id
            }),
            "cannot store to `a`: it is an `In` parameter (declare it `Out<..>`)",
        ),
        (
            "dot shapes",
            Box::new(|a, p| {
                let s1 = a.names(&["64", "32"]);
                let s2 = a.names(&["16", "64"]);
                let (x, y) = (a.call("zeros", vec![s1]), a.call("zeros", vec![s2]));
                let c = a.call("dot", vec![x, y]);
                let id = c.id;
                p.body.push(a.expr(c));
                id
            }),
            "dot: inner dims differ: f32[64, 32] · f32[16, 64] contracts 32 with 16",
        ),
        (
            "assign immutable",
            Box::new(|a, p| {
                let v = a.int(0);
                let s = a.assign("i", v);
                let id = s.id;
                p.body.push(s);
                id
            }),
            "cannot assign to `i`: declare it with `let mut`",
        ),
        (
            "unknown variable",
            Box::new(|a, p| {
                let v = a.var("nope");
                let id = v.id;
                p.body.push(a.expr(v));
                id
            }),
            "unknown variable `nope`",
        ),
        (
            "dtype mismatch",
            Box::new(|a, p| {
                let s = a.names(&["4"]);
                let x = a.call_ty("zeros", DType::BF16, vec![s]);
                let y = a.var("acc");
                let b = a.bin(BinOp::Add, x, y);
                let id = b.id;
                p.body.push(a.expr(b));
                id
            }),
            "dtype mismatch: `+` of bf16[4] and f32[64, 64] (insert a cast)",
        ),
        (
            "bad grid",
            Box::new(|a, p| {
                let g = a.int(4);
                let id = g.id;
                p.grid[2] = g;
                id
            }),
            "a constant grid entry must be 1, got 4; a grid entry is `1`, `x.dim(a)`, a product of dims, or `cdiv(dims, TILE)` with a constant TILE",
        ),
        (
            "index of wrong rank",
            Box::new(|a, p| {
                let (x, idx, s) = (a.var("a"), a.names(&["i"]), a.names(&["4"]));
                let c = a.call("load", vec![x, idx, s]);
                let id = c.id;
                p.body.push(a.expr(c));
                id
            }),
            "`a` has rank 2 but 1 indices are given",
        ),
    ];
    for (what, edit, message) in cases {
        let mut a = Ast::default();
        let mut p = matmul(&mut a);
        let id = edit(&mut a, &mut p);
        let e = err(&p);
        assert_eq!((e.span, e.message.as_str()), (id, message), "case `{what}`");
    }
}
