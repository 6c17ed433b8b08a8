//! The `tile!` front end: an AST of explicit block programs and its lowering to Tile IR.
//!
//! The `tile!` proc macro parses Rust-like source with syn into a [`Program`], calls [`lower`]
//! with the default knobs at compile time (so mistakes are compile errors at the right span),
//! and embeds the same [`Program`] as a constructor expression so the runtime can lower it again
//! with other knob values. Every node carries a [`NodeId`]; a [`DslError`] names the node it is
//! about, and the macro maps that id back to a source span.
//!
//! # Surface grammar (what the macro accepts)
//!
//! ```text
//! program := attrs vis 'fn' NAME ('<' knob,* '>')? '(' param,* ')' 'grid' '=' '(' expr,* ')' block
//! knob    := 'const' NAME ':' i64 ('=' INT)?
//! param   := NAME ':' ('In' | 'Out') '<' DTYPE ',' RANK '>'
//! block   := '{' stmt* '}'
//! stmt    := 'let' 'mut'? NAME '=' expr ';'
//!          | NAME '=' expr ';'                       // only `let mut` variables
//!          | 'for' NAME 'in' ('range(' lo ',' hi (',' step)? ')' | lo '..' hi) block
//!          | expr ';'
//! expr    := INT | FLOAT | 'true' | 'false' | 'inf' | NAME | '-' expr | '!' expr | '(' expr ')'
//!          | expr BINOP expr                         // + - * / %  < <= > >= == !=  & |
//!          | FUNC ('::' '<' DTYPE '>')? '(' arg,* ')'
//!          | expr '.' FUNC ('::' '<' DTYPE '>')? '(' arg,* ')'   // = FUNC(expr, arg,*)
//!          | '[' expr,* ']'                          // index and shape lists
//! arg     := expr | NAME '=' expr                    // named: `mask = m`, `other = -inf`
//! ```
//!
//! The grid has one to three entries, each `1`, `x.dim(a)`, a product of such dims, or
//! `cdiv(dims, TILE)` with `TILE` a constant (missing entries are 1).
//!
//! # Built-in functions
//!
//! | function | meaning |
//! |---|---|
//! | `program_id(axis)` | the block's id along grid axis 0–2 (`i32`) |
//! | `x.dim(axis)` | run-time size of a tensor parameter's axis (`i32`) |
//! | `arange(n)` | `[0, 1, .., n-1]` as `i32[n]` |
//! | `zeros::<T>([..])`, `full::<T>([..], v)` | constant tiles (`T` defaults to `f32`) |
//! | `load(x, [i, ..], [BM, ..], mask = m, other = v)` | block load, masked by bounds and `m` |
//! | `load_masked(x, [i, ..], [BM, ..], m, v)` | the same, positional |
//! | `store(x, [i, ..], value, mask = m)` | block store into an `Out` parameter |
//! | `dot(a, b)`, `dot(a, b, acc)` | `acc + a·b`, accumulated in `f32` |
//! | `exp log sqrt rsqrt tanh sigmoid relu gelu abs` | elementwise (float) |
//! | `maximum(a, b)`, `minimum(a, b)` | elementwise binary |
//! | `lt le gt ge eq ne`, `< <= > >= == !=` | comparisons giving `bool` masks |
//! | `a & b`, `a \| b`, `!a` | mask logic (on `bool` values) |
//! | `where_(m, a, b)`, `select(m, a, b)` | `m ? a : b` |
//! | `sum(x, axis)`, `max(x, axis)` | reductions removing `axis` |
//! | `expand(x, axis)`, `broadcast(x, [..])`, `trans(x)` / `x.t()` | shape ops |
//! | `cast::<T>(x)` | dtype conversion |
//! | `cdiv(a, b)` | ceiling division of constants (and in the grid) |
//!
//! Binary operands broadcast numpy-style; integer and float literals take the dtype of the other
//! operand. Variables assigned inside a `for` body that were declared outside it are carried
//! through the loop (`Op::For` iter args) and hold the final values after it.

mod lower;

#[cfg(test)]
mod tests;

pub use lower::lower;

use crate::DType;
use std::fmt;

/// Identifies one AST node; the macro keeps a span per id.
pub type NodeId = u32;

/// A whole `tile!` program.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// The node of the whole program (errors about the kernel as a whole point here).
    pub id: NodeId,
    pub name: String,
    pub knobs: Vec<Knob>,
    pub params: Vec<ParamDecl>,
    /// One to three grid entries.
    pub grid: Vec<Expr>,
    pub body: Vec<Stmt>,
}

/// A schedule knob: `const BM: i64 = 64`.
#[derive(Clone, Debug, PartialEq)]
pub struct Knob {
    pub id: NodeId,
    pub name: String,
    pub default: Option<i64>,
}

/// Whether a tensor parameter is read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    In,
    Out,
}

/// A tensor parameter: `a: In<f32, 2>`.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamDecl {
    pub id: NodeId,
    pub name: String,
    pub access: Access,
    pub dtype: DType,
    pub rank: usize,
}

/// A statement with its node id.
#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub id: NodeId,
    pub kind: StmtKind,
}

/// Statement forms.
#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    /// `let [mut] name = value;`
    Let {
        name: String,
        mutable: bool,
        value: Expr,
    },
    /// `name = value;`
    Assign { name: String, value: Expr },
    /// An expression evaluated for its effect (`store(..)`).
    Expr(Expr),
    /// `for var in iter { body }`; `iter` is a call to `range`.
    For {
        var: String,
        iter: Expr,
        body: Vec<Stmt>,
    },
}

/// An expression with its node id.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub id: NodeId,
    pub kind: ExprKind,
}

/// Expression forms.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Int(i64),
    Float(f64),
    Bool(bool),
    /// A variable, knob or parameter name.
    Var(String),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// A call `func::<ty>(args, name = value)`; method calls put the receiver first.
    Call {
        func: String,
        ty: Option<DType>,
        args: Vec<Expr>,
        named: Vec<(String, Expr)>,
    },
    /// `[a, b]`: an index or shape list.
    List(Vec<Expr>),
}

/// Prefix operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

/// Infix operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
}

impl BinOp {
    /// The operator as written in source.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::And => "&",
            BinOp::Or => "|",
        }
    }
}

impl Expr {
    /// Builds an expression node.
    pub fn new(id: NodeId, kind: ExprKind) -> Self {
        Expr { id, kind }
    }
}

impl Stmt {
    /// Builds a statement node.
    pub fn new(id: NodeId, kind: StmtKind) -> Self {
        Stmt { id, kind }
    }
}

/// A front-end error: the node it is about and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DslError {
    /// The [`NodeId`] of the offending node.
    pub span: NodeId,
    pub message: String,
}

impl DslError {
    /// An error at node `span`.
    pub fn new(span: NodeId, message: impl Into<String>) -> Self {
        DslError {
            span,
            message: message.into(),
        }
    }
}

impl fmt::Display for DslError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DslError {}
