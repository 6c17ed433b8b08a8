//! The lexer and cursor shared by the textual forms of every IR level.
//!
//! All IR texts use one token vocabulary: `%value`, `@symbol`, identifiers (with dots, as in
//! `reduce.sum`), integers and floats, and punctuation. Parse errors carry `line:col`.

mod lexer;

pub use lexer::{Cursor, ParseError, Tok, Token, fmt_float, lex};
