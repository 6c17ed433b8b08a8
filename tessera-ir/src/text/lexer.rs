use std::fmt;

/// A parse error at a `line:col` position of an IR text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub col: usize,
    /// What was expected or found.
    pub message: String,
}

/// Token kinds.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// `%name` or `%3`
    Value(String),
    /// `@name`
    Symbol(String),
    /// identifier, may contain dots: `reduce.sum`
    Ident(String),
    /// An integer literal.
    Int(i64),
    /// A float literal.
    Float(f64),
    /// one of `( ) [ ] { } , : = < > * + /` or the arrow `->`
    Punct(&'static str),
    /// The end of the text.
    Eof,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Value(v) => write!(f, "`%{v}`"),
            Tok::Symbol(s) => write!(f, "`@{s}`"),
            Tok::Ident(s) => write!(f, "`{s}`"),
            Tok::Int(i) => write!(f, "`{i}`"),
            Tok::Float(x) => write!(f, "`{x:?}`"),
            Tok::Punct(p) => write!(f, "`{p}`"),
            Tok::Eof => f.write_str("end of input"),
        }
    }
}

/// A token with its position.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// The token.
    pub tok: Tok,
    /// 1-based line of its first character.
    pub line: usize,
    /// 1-based column of its first character.
    pub col: usize,
}

const PUNCTS: [&str; 14] = [
    "->", "(", ")", "[", "]", "{", "}", ",", ":", "=", "<", ">", "*", "/",
];

/// Splits an IR text into tokens. `;` starts a comment that runs to the end of the line.
pub fn lex(src: &str) -> Result<Vec<Token>, ParseError> {
    let mut out = Vec::new();
    let chars: Vec<char> = src.chars().collect();
    let (mut i, mut line, mut col) = (0usize, 1usize, 1usize);
    let ident_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    while i < chars.len() {
        let c = chars[i];
        let (tl, tc) = (line, col);
        let advance = |n: usize, i: &mut usize, col: &mut usize| {
            *i += n;
            *col += n;
        };
        if c == '\n' {
            i += 1;
            line += 1;
            col = 1;
            continue;
        }
        if c.is_whitespace() {
            advance(1, &mut i, &mut col);
            continue;
        }
        if c == ';' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        let err = |m: String| ParseError {
            line: tl,
            col: tc,
            message: m,
        };
        if c == '%' || c == '@' {
            let start = i + 1;
            let mut j = start;
            while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            if j == start {
                return Err(err(format!("expected a name after `{c}`")));
            }
            let name: String = chars[start..j].iter().collect();
            out.push(Token {
                tok: if c == '%' {
                    Tok::Value(name)
                } else {
                    Tok::Symbol(name)
                },
                line: tl,
                col: tc,
            });
            advance(j - i, &mut i, &mut col);
            continue;
        }
        let starts_number = c.is_ascii_digit()
            || (c == '-'
                && i + 1 < chars.len()
                && (chars[i + 1].is_ascii_digit() || chars[i + 1] == 'i'))
            || (c == '.' && i + 1 < chars.len() && chars[i + 1].is_ascii_digit());
        if starts_number {
            let mut j = i;
            if chars[j] == '-' {
                j += 1;
            }
            let rest: String = chars[j..chars.len().min(j + 3)].iter().collect();
            if rest == "inf" {
                out.push(Token {
                    tok: Tok::Float(if c == '-' {
                        f64::NEG_INFINITY
                    } else {
                        f64::INFINITY
                    }),
                    line: tl,
                    col: tc,
                });
                advance(j + 3 - i, &mut i, &mut col);
                continue;
            }
            let mut is_float = false;
            while j < chars.len() {
                let d = chars[j];
                if d.is_ascii_digit() {
                    j += 1;
                } else if d == '.' || d == 'e' || d == 'E' {
                    is_float = true;
                    j += 1;
                    if (d == 'e' || d == 'E')
                        && j < chars.len()
                        && (chars[j] == '-' || chars[j] == '+')
                    {
                        j += 1;
                    }
                } else {
                    break;
                }
            }
            let text: String = chars[i..j].iter().collect();
            let tok = if is_float {
                Tok::Float(
                    text.parse()
                        .map_err(|_| err(format!("bad number `{text}`")))?,
                )
            } else {
                Tok::Int(
                    text.parse()
                        .map_err(|_| err(format!("bad integer `{text}`")))?,
                )
            };
            out.push(Token {
                tok,
                line: tl,
                col: tc,
            });
            advance(j - i, &mut i, &mut col);
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let mut j = i;
            while j < chars.len() && ident_char(chars[j]) {
                j += 1;
            }
            let s: String = chars[i..j].iter().collect();
            let tok = match s.as_str() {
                "inf" => Tok::Float(f64::INFINITY),
                "nan" => Tok::Float(f64::NAN),
                _ => Tok::Ident(s),
            };
            out.push(Token {
                tok,
                line: tl,
                col: tc,
            });
            advance(j - i, &mut i, &mut col);
            continue;
        }
        let two: String = chars[i..chars.len().min(i + 2)].iter().collect();
        if let Some(p) = PUNCTS.iter().find(|p| two.starts_with(**p)) {
            out.push(Token {
                tok: Tok::Punct(p),
                line: tl,
                col: tc,
            });
            advance(p.len(), &mut i, &mut col);
            continue;
        }
        return Err(err(format!("unexpected character `{c}`")));
    }
    out.push(Token {
        tok: Tok::Eof,
        line,
        col,
    });
    Ok(out)
}

/// A cursor over tokens with the helpers every IR parser needs.
pub struct Cursor {
    toks: Vec<Token>,
    pos: usize,
}

impl Cursor {
    /// Lexes `src` and places the cursor at its first token.
    pub fn new(src: &str) -> Result<Self, ParseError> {
        Ok(Cursor {
            toks: lex(src)?,
            pos: 0,
        })
    }

    /// The current token.
    pub fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }

    /// The token after the current one.
    pub fn peek2(&self) -> &Tok {
        &self.toks[(self.pos + 1).min(self.toks.len() - 1)].tok
    }

    /// Consumes and returns the current token.
    pub fn next(&mut self) -> Tok {
        let t = self.toks[self.pos].tok.clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    /// An error at the current token.
    pub fn error(&self, message: impl Into<String>) -> ParseError {
        let t = &self.toks[self.pos];
        ParseError {
            line: t.line,
            col: t.col,
            message: message.into(),
        }
    }

    /// True (and consumed) when the current token is the punctuation `p`.
    pub fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Tok::Punct(q) if *q == p) {
            self.next();
            true
        } else {
            false
        }
    }

    /// True (and consumed) when the current token is the keyword `kw`.
    pub fn eat_kw(&mut self, kw: &str) -> bool {
        if matches!(self.peek(), Tok::Ident(s) if s == kw) {
            self.next();
            true
        } else {
            false
        }
    }

    /// Consumes the punctuation `p` or fails.
    pub fn expect(&mut self, p: &str) -> Result<(), ParseError> {
        if self.eat(p) {
            Ok(())
        } else {
            Err(self.error(format!("expected `{p}`, found {}", self.peek())))
        }
    }

    /// Consumes the keyword `kw` or fails.
    pub fn expect_kw(&mut self, kw: &str) -> Result<(), ParseError> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            Err(self.error(format!("expected `{kw}`, found {}", self.peek())))
        }
    }

    /// Consumes an identifier.
    pub fn ident(&mut self) -> Result<String, ParseError> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                self.next();
                Ok(s)
            }
            t => Err(self.error(format!("expected a name, found {t}"))),
        }
    }

    /// Consumes a `%value`.
    pub fn value(&mut self) -> Result<String, ParseError> {
        match self.peek().clone() {
            Tok::Value(s) => {
                self.next();
                Ok(s)
            }
            t => Err(self.error(format!("expected a `%value`, found {t}"))),
        }
    }

    /// Consumes an `@symbol`.
    pub fn symbol(&mut self) -> Result<String, ParseError> {
        match self.peek().clone() {
            Tok::Symbol(s) => {
                self.next();
                Ok(s)
            }
            t => Err(self.error(format!("expected an `@name`, found {t}"))),
        }
    }

    /// Consumes an integer.
    pub fn int(&mut self) -> Result<i64, ParseError> {
        match self.peek().clone() {
            Tok::Int(i) => {
                self.next();
                Ok(i)
            }
            t => Err(self.error(format!("expected an integer, found {t}"))),
        }
    }

    /// Consumes a non-negative integer that fits `usize`.
    pub fn usize(&mut self) -> Result<usize, ParseError> {
        let here = self.error("");
        let i = self.int()?;
        usize::try_from(i).map_err(|_| ParseError {
            message: format!("expected a non-negative integer, found {i}"),
            ..here
        })
    }

    /// Consumes a non-negative integer that fits `u32`.
    pub fn u32(&mut self) -> Result<u32, ParseError> {
        let here = self.error("");
        let i = self.int()?;
        u32::try_from(i).map_err(|_| ParseError {
            message: format!("expected an integer in 0..={}, found {i}", u32::MAX),
            ..here
        })
    }

    /// Consumes a number (integer or float) as f64.
    pub fn number(&mut self) -> Result<f64, ParseError> {
        match self.peek().clone() {
            Tok::Int(i) => {
                self.next();
                Ok(i as f64)
            }
            Tok::Float(x) => {
                self.next();
                Ok(x)
            }
            t => Err(self.error(format!("expected a number, found {t}"))),
        }
    }

    /// Parses `[a, b, c]` with `item` for each element.
    pub fn list<T>(
        &mut self,
        open: &str,
        close: &str,
        mut item: impl FnMut(&mut Self) -> Result<T, ParseError>,
    ) -> Result<Vec<T>, ParseError> {
        self.expect(open)?;
        let mut out = Vec::new();
        if self.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(item(self)?);
            if self.eat(close) {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }

    /// True at the end of input.
    pub fn at_end(&self) -> bool {
        matches!(self.peek(), Tok::Eof)
    }
}

/// Formats a float so that it parses back to the same value.
pub fn fmt_float(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        let s = format!("{x:?}");
        if s.contains('.') || s.contains('e') {
            s
        } else {
            format!("{s}.0")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexes_every_token_kind() {
        let toks = lex("%x = reduce.sum %0 : f32[M, 4] -> @k ; comment\n 1.5e-3 -2 -inf").unwrap();
        let kinds: Vec<Tok> = toks.into_iter().map(|t| t.tok).collect();
        assert_eq!(kinds[0], Tok::Value("x".into()));
        assert_eq!(kinds[2], Tok::Ident("reduce.sum".into()));
        assert!(kinds.contains(&Tok::Symbol("k".into())));
        assert!(kinds.contains(&Tok::Float(1.5e-3)));
        assert!(kinds.contains(&Tok::Int(-2)));
        assert!(kinds.contains(&Tok::Float(f64::NEG_INFINITY)));
    }

    #[test]
    fn errors_carry_line_and_column() {
        let e = lex("ok\n  $").unwrap_err();
        assert_eq!((e.line, e.col), (2, 3));
    }

    #[test]
    fn floats_round_trip() {
        for x in [0.0, 1.0, -2.5, 1e-30, 3.0e38, f64::INFINITY] {
            assert_eq!(fmt_float(x).parse::<f64>().unwrap_or(f64::INFINITY), x);
        }
    }
}
