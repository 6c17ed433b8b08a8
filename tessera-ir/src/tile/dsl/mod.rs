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
    /// The kernel's name.
    pub name: String,
    /// The schedule knobs, in declaration order.
    pub knobs: Vec<Knob>,
    /// The tensor parameters, in launch order.
    pub params: Vec<ParamDecl>,
    /// One to three grid entries.
    pub grid: Vec<Expr>,
    /// The program body.
    pub body: Vec<Stmt>,
}

/// A schedule knob: `const BM: i64 = 64`.
#[derive(Clone, Debug, PartialEq)]
pub struct Knob {
    /// The declaration's node.
    pub id: NodeId,
    /// The knob's name (`BM`).
    pub name: String,
    /// Its default value, when declared with one.
    pub default: Option<i64>,
}

/// Whether a tensor parameter is read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read only: `In<dtype, rank>`.
    In,
    /// Written: `Out<dtype, rank>`.
    Out,
}

/// A tensor parameter: `a: In<f32, 2>`.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamDecl {
    /// The declaration's node.
    pub id: NodeId,
    /// The parameter's name.
    pub name: String,
    /// Read or written.
    pub access: Access,
    /// The element type.
    pub dtype: DType,
    /// The rank.
    pub rank: usize,
}

/// A statement with its node id.
#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    /// The statement's node.
    pub id: NodeId,
    /// Its form.
    pub kind: StmtKind,
}

/// Statement forms.
#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    /// `let [mut] name = value;`
    Let {
        /// The variable.
        name: String,
        /// True for `let mut`.
        mutable: bool,
        /// The initial value.
        value: Expr,
    },
    /// `name = value;`
    Assign {
        /// The variable (a `let mut` one).
        name: String,
        /// The new value.
        value: Expr,
    },
    /// An expression evaluated for its effect (`store(..)`).
    Expr(Expr),
    /// `for var in iter { body }`; `iter` is a call to `range`.
    For {
        /// The loop variable.
        var: String,
        /// The `range(..)` call.
        iter: Expr,
        /// The loop body.
        body: Vec<Stmt>,
    },
}

/// An expression with its node id.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    /// The expression's node.
    pub id: NodeId,
    /// Its form.
    pub kind: ExprKind,
}

/// Expression forms.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// An integer literal.
    Int(i64),
    /// A float literal.
    Float(f64),
    /// `true` or `false`.
    Bool(bool),
    /// A variable, knob or parameter name.
    Var(String),
    /// A prefix operator and its operand.
    Unary(UnOp, Box<Expr>),
    /// An infix operator and its operands.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// A call `func::<ty>(args, name = value)`; method calls put the receiver first.
    Call {
        /// The function's name.
        func: String,
        /// The turbofish dtype, if any.
        ty: Option<DType>,
        /// Positional arguments, the receiver first.
        args: Vec<Expr>,
        /// Named arguments (`mask = m`), in order.
        named: Vec<(String, Expr)>,
    },
    /// `[a, b]`: an index or shape list.
    List(Vec<Expr>),
}

/// Prefix operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// `-a`.
    Neg,
    /// `!a`.
    Not,
}

/// Infix operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// `a % b`.
    Rem,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
    /// `a == b`.
    Eq,
    /// `a != b`.
    Ne,
    /// `a && b`.
    And,
    /// `a
    /// b`.
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
    /// What is wrong, in words.
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
