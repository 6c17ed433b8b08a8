//! PTX text → [`Program`]: statements, declarations, labels; instructions are decoded by
//! [`super::decode`]. Errors carry the 1-based line.

use super::decode::{self, Ctx};
use super::ir::{Program, Ty};
use std::collections::HashMap;

/// A parse or decode error at a line.
#[derive(Debug, Clone)]
pub(crate) struct ParseError {
    pub line: u32,
    pub message: String,
}

pub(crate) fn err<T>(line: u32, message: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        line,
        message: message.into(),
    })
}

/// One statement of the module: its first line and its text (no `;`, comments removed).
#[derive(Debug)]
enum Stmt {
    Module(u32, String),
    /// The text before an entry's `{`.
    Header(u32, String),
    Body(u32, String),
    EndBody,
}

/// Splits the module into statements, tracking `{ }` of the entry body and operand vectors.
fn statements(text: &str) -> Vec<Stmt> {
    let mut out = Vec::new();
    let mut buf = String::new();
    let mut start = 1u32;
    let mut line = 1u32;
    let mut depth = 0u32; // body nesting
    let mut vec = 0u32; // operand `{` nesting inside a statement
    let b = text.as_bytes();
    let mut i = 0;
    let push = |out: &mut Vec<Stmt>, buf: &mut String, start: u32, depth: u32| {
        let t = buf.trim();
        if !t.is_empty() {
            out.push(if depth == 0 {
                Stmt::Module(start, t.to_string())
            } else {
                Stmt::Body(start, t.to_string())
            });
        }
        buf.clear();
    };
    while i < b.len() {
        let c = b[i] as char;
        if c == '/' && i + 1 < b.len() && b[i + 1] == b'/' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && i + 1 < b.len() && b[i + 1] == b'*' {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                if b[i] == b'\n' {
                    line += 1;
                }
                i += 1;
            }
            i += 2;
            continue;
        }
        match c {
            '\n' => {
                line += 1;
                if depth == 0 {
                    let t = buf.trim_start();
                    if t.starts_with(".version")
                        || t.starts_with(".target")
                        || t.starts_with(".address_size")
                    {
                        push(&mut out, &mut buf, start, 0);
                    }
                }
                buf.push(' ');
            }
            ';' if vec == 0 => push(&mut out, &mut buf, start, depth),
            '{' if depth == 0 => {
                let t = buf.trim().to_string();
                buf.clear();
                out.push(Stmt::Header(start, t));
                depth = 1;
            }
            '{' if buf.trim().is_empty() => depth += 1,
            '{' => {
                vec += 1;
                buf.push(c);
            }
            '}' if vec > 0 => {
                vec -= 1;
                buf.push(c);
            }
            '}' => {
                push(&mut out, &mut buf, start, depth);
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    out.push(Stmt::EndBody);
                }
            }
            _ => {
                if buf.trim().is_empty() && !c.is_whitespace() {
                    start = line;
                }
                buf.push(c);
            }
        }
        i += 1;
    }
    push(&mut out, &mut buf, start, depth);
    out
}

/// Splits `s` at top-level commas (outside `{}` and `[]`).
pub(crate) fn split_args(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut d, mut from) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' | '[' | '(' => d += 1,
            '}' | ']' | ')' => d -= 1,
            ',' if d == 0 => {
                out.push(s[from..i].trim());
                from = i + 1;
            }
            _ => {}
        }
    }
    let last = s[from..].trim();
    if !last.is_empty() || !out.is_empty() {
        out.push(last);
    }
    out
}

/// Register declarations: `%r<82>` ranges and single names.
#[derive(Default)]
pub(crate) struct Regs {
    pub ranges: HashMap<String, (u32, Ty)>,
    pub names: HashMap<String, u32>,
    pub singles: HashMap<String, Ty>,
    pub list: Vec<String>,
}

impl Regs {
    /// The index of register `name` (without `%`), allocated on first use.
    pub(crate) fn get(&mut self, name: &str) -> Option<u32> {
        if let Some(&i) = self.names.get(name) {
            return Some(i);
        }
        let declared = self.singles.contains_key(name) || {
            let p = name.trim_end_matches(|c: char| c.is_ascii_digit());
            let n = &name[p.len()..];
            !n.is_empty()
                && self
                    .ranges
                    .get(p)
                    .is_some_and(|&(count, _)| n.parse::<u32>().is_ok_and(|n| n < count))
        };
        if !declared {
            return None;
        }
        let i = self.list.len() as u32;
        self.list.push(format!("%{name}"));
        self.names.insert(name.to_string(), i);
        Some(i)
    }
}

fn align_up(x: u32, a: u32) -> u32 {
    x.div_ceil(a.max(1)) * a.max(1)
}

/// Parses `.shared [.align N] .type name[size]` (or `[]` for `.extern`); returns (name, align, bytes).
fn shared_decl(line: u32, s: &str) -> Result<(String, u32, Option<u32>), ParseError> {
    let toks: Vec<&str> = s.split_whitespace().collect();
    let mut align = 0;
    let mut ty = None;
    let mut name = None;
    let mut k = 0;
    while k < toks.len() {
        match toks[k] {
            ".extern" | ".shared" | ".visible" => {}
            ".align" => {
                k += 1;
                align = toks
                    .get(k)
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| ParseError {
                        line,
                        message: format!("bad .align in `{s}`"),
                    })?;
            }
            t if t.starts_with('.') => ty = Ty::parse(&t[1..]),
            t => name = Some(t.to_string()),
        }
        k += 1;
    }
    let (Some(ty), Some(name)) = (ty, name) else {
        return err(line, format!("cannot parse shared declaration `{s}`"));
    };
    let esize = ty.bytes();
    let align = if align == 0 { esize } else { align };
    if let Some(open) = name.find('[') {
        let inner = name[open + 1..].trim_end_matches(']').trim();
        let n = if inner.is_empty() {
            None
        } else {
            Some(
                inner.parse::<u32>().map_err(|_| ParseError {
                    line,
                    message: format!("bad array size in `{s}`"),
                })? * esize,
            )
        };
        Ok((name[..open].to_string(), align, n))
    } else {
        Ok((name, align, Some(esize)))
    }
}

/// Parses the entry `entry` of a PTX module.
pub(crate) fn parse(text: &str, entry: &str) -> Result<Program, ParseError> {
    let stmts = statements(text);
    let mut shared: HashMap<String, u64> = HashMap::new();
    let mut static_end = 0u32;
    let mut externs: Vec<(String, u32)> = Vec::new();
    let mut params: Vec<(String, Ty, u32)> = Vec::new();
    let mut param_bytes = 0u32;
    let (mut maxntid, mut reqntid) = (None, None);
    let mut regs = Regs::default();
    let mut found = false;
    let mut in_entry = false;
    let mut skipping = false;
    let mut body: Vec<(u32, String)> = Vec::new();
    let mut labels: HashMap<String, u32> = HashMap::new();
    for st in &stmts {
        match st {
            Stmt::Module(line, s) => {
                let line = *line;
                if s.starts_with(".version")
                    || s.starts_with(".target")
                    || s.starts_with(".address_size")
                {
                    if s.starts_with(".address_size") && !s.ends_with("64") {
                        return err(line, "only .address_size 64 is supported");
                    }
                    continue;
                }
                if s.contains(".shared") {
                    let (name, align, size) = shared_decl(line, s)?;
                    match size {
                        None => externs.push((name, align)),
                        Some(n) => {
                            static_end = align_up(static_end, align);
                            shared.insert(name, static_end as u64);
                            static_end += n;
                        }
                    }
                    continue;
                }
                return err(line, format!("unsupported module-level statement `{s}`"));
            }
            Stmt::Header(line, s) => {
                let line = *line;
                if s.contains(".func") {
                    return err(line, "device functions (.func) are not supported");
                }
                let Some(at) = s.find(".entry") else {
                    return err(line, format!("unexpected block after `{s}`"));
                };
                let rest = &s[at + 6..];
                let open = rest.find('(').unwrap_or(rest.len());
                let name = rest[..open].trim();
                if name != entry {
                    skipping = true;
                    continue;
                }
                found = true;
                in_entry = true;
                let close = rest.rfind(')').unwrap_or(rest.len());
                if open < close {
                    for p in split_args(&rest[open + 1..close]) {
                        let toks: Vec<&str> = p.split_whitespace().collect();
                        if toks.len() != 3 || toks[0] != ".param" {
                            return err(line, format!("unsupported parameter `{p}`"));
                        }
                        let ty = Ty::parse(toks[1].trim_start_matches('.')).ok_or_else(|| {
                            ParseError {
                                line,
                                message: format!("bad parameter type in `{p}`"),
                            }
                        })?;
                        param_bytes = align_up(param_bytes, ty.bytes());
                        params.push((toks[2].to_string(), ty, param_bytes));
                        param_bytes += ty.bytes();
                    }
                }
                let tail = if close < rest.len() {
                    &rest[close + 1..]
                } else {
                    ""
                };
                let mut toks = tail.split_whitespace().peekable();
                while let Some(t) = toks.next() {
                    let mut product = || {
                        let mut p = 1u32;
                        while let Some(n) = toks
                            .peek()
                            .and_then(|x| x.trim_end_matches(',').parse::<u32>().ok())
                        {
                            p *= n;
                            toks.next();
                        }
                        p
                    };
                    match t {
                        ".maxntid" => maxntid = Some(product()),
                        ".reqntid" => reqntid = Some(product()),
                        ".minnctapersm" | ".maxnreg" => {
                            product();
                        }
                        _ => return err(line, format!("unsupported entry directive `{t}`")),
                    }
                }
            }
            Stmt::EndBody => {
                in_entry = false;
                skipping = false;
            }
            Stmt::Body(line, s) => {
                let line = *line;
                if skipping {
                    continue;
                }
                if !in_entry {
                    return err(line, format!("statement outside an entry: `{s}`"));
                }
                let mut s = s.as_str();
                // labels
                loop {
                    let id_end = s
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
                        .unwrap_or(s.len());
                    if id_end > 0
                        && s[id_end..].starts_with(':')
                        && !s[id_end..].starts_with("::")
                        && !s.starts_with('%')
                    {
                        labels.insert(s[..id_end].to_string(), body.len() as u32);
                        s = s[id_end + 1..].trim_start();
                    } else {
                        break;
                    }
                }
                if s.is_empty() {
                    continue;
                }
                if let Some(d) = s.strip_prefix(".reg") {
                    let d = d.trim();
                    let (tyt, names) =
                        d.split_once(char::is_whitespace)
                            .ok_or_else(|| ParseError {
                                line,
                                message: format!("bad .reg `{s}`"),
                            })?;
                    let ty = Ty::parse(tyt.trim_start_matches('.')).ok_or_else(|| ParseError {
                        line,
                        message: format!("bad .reg type in `{s}`"),
                    })?;
                    for n in names.split(',') {
                        let n = n.trim().trim_start_matches('%');
                        if let Some(lt) = n.find('<') {
                            let c: u32 =
                                n[lt + 1..].trim_end_matches('>').parse().map_err(|_| {
                                    ParseError {
                                        line,
                                        message: format!("bad register range `{n}`"),
                                    }
                                })?;
                            regs.ranges.insert(n[..lt].to_string(), (c, ty));
                        } else {
                            regs.singles.insert(n.to_string(), ty);
                        }
                    }
                    continue;
                }
                if s.starts_with(".shared") {
                    let (name, align, size) = shared_decl(line, s)?;
                    let Some(n) = size else {
                        return err(line, "a .shared array inside an entry needs a size");
                    };
                    static_end = align_up(static_end, align);
                    shared.insert(name, static_end as u64);
                    static_end += n;
                    continue;
                }
                if s.starts_with(".pragma") {
                    continue;
                }
                if s.starts_with('.') {
                    return err(line, format!("unsupported directive `{s}`"));
                }
                body.push((line, s.to_string()));
            }
        }
    }
    if !found {
        return err(1, format!("entry `{entry}` not found in the module"));
    }
    let dyn_align = externs.iter().map(|e| e.1).max().unwrap_or(16).max(16);
    let dyn_offset = align_up(static_end, dyn_align);
    for (name, _) in &externs {
        shared.insert(name.clone(), dyn_offset as u64);
    }
    let param_off: HashMap<String, u32> = params.iter().map(|(n, _, o)| (n.clone(), *o)).collect();
    let mut cx = Ctx {
        regs: &mut regs,
        shared: &shared,
        params: &param_off,
        labels: &labels,
    };
    let mut insts = Vec::with_capacity(body.len());
    for (line, s) in &body {
        insts.push(decode::decode(&mut cx, *line, s)?);
    }
    Ok(Program {
        params,
        param_bytes,
        nregs: regs.list.len() as u32,
        insts,
        static_smem: static_end,
        dyn_offset,
        maxntid,
        reqntid,
    })
}
