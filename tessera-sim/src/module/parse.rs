//! PTX text → entries: statements, declarations, labels; instructions are decoded by
//! [`super::decode`]. Errors carry the 1-based line and column.

use super::decode::{self, Ctx, DecodeError};
use super::ir::{Program, Symbol, Ty};
use super::{ParamDecl, ParamType, Unsupported};
use crate::error::ParseError;
use std::collections::HashMap;

pub(crate) fn err<T>(line: u32, column: u32, message: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        line,
        column,
        message: message.into(),
    })
}

/// What a statement is.
#[derive(Debug, PartialEq)]
enum Kind {
    Module,
    /// The text before a `{` at module level (an entry header, a `.func`, a `.section`).
    Header,
    Body,
    EndBody,
}

/// One statement of the module: where it starts and its text (no `;`, comments removed).
#[derive(Debug)]
struct Stmt {
    kind: Kind,
    line: u32,
    col: u32,
    text: String,
}

/// Splits the module into statements, tracking `{ }` of bodies and operand vectors.
fn statements(text: &str) -> Vec<Stmt> {
    let mut out = Vec::new();
    let mut buf = String::new();
    let (mut start, mut start_col) = (1u32, 1u32);
    let (mut line, mut col) = (1u32, 1u32);
    let mut depth = 0u32; // body nesting
    let mut vec = 0u32; // operand `{` nesting inside a statement
    let b = text.as_bytes();
    let mut i = 0;
    let push = |out: &mut Vec<Stmt>, buf: &mut String, line: u32, col: u32, depth: u32| {
        let t = buf.trim();
        if !t.is_empty() {
            out.push(Stmt {
                kind: if depth == 0 { Kind::Module } else { Kind::Body },
                line,
                col,
                text: t.to_string(),
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
            col += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                if b[i] == b'\n' {
                    line += 1;
                    col = 0;
                }
                i += 1;
                col += 1;
            }
            i += 2;
            col += 2;
            continue;
        }
        match c {
            '\n' => {
                if depth == 0 {
                    let t = buf.trim_start();
                    if t.starts_with(".version")
                        || t.starts_with(".target")
                        || t.starts_with(".address_size")
                        || t.starts_with(".file")
                    {
                        push(&mut out, &mut buf, start, start_col, 0);
                    }
                }
                line += 1;
                col = 0;
                buf.push(' ');
            }
            ';' if vec == 0 => push(&mut out, &mut buf, start, start_col, depth),
            '{' if depth == 0 => {
                let t = buf.trim().to_string();
                buf.clear();
                out.push(Stmt {
                    kind: Kind::Header,
                    line: start,
                    col: start_col,
                    text: t,
                });
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
                push(&mut out, &mut buf, start, start_col, depth);
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    out.push(Stmt {
                        kind: Kind::EndBody,
                        line,
                        col,
                        text: String::new(),
                    });
                }
            }
            _ => {
                if buf.trim().is_empty() && !c.is_whitespace() {
                    start = line;
                    start_col = col;
                }
                buf.push(c);
            }
        }
        i += 1;
        col += 1;
    }
    push(&mut out, &mut buf, start, start_col, depth);
    out
}

/// Splits `s` at top-level commas (outside `{}`, `[]` and `()`).
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

/// A `.shared` / `.local` variable declaration.
struct VarDecl {
    name: String,
    align: u32,
    /// `None` for `.extern` arrays with `[]`.
    bytes: Option<u32>,
}

/// Parses `[.extern] .shared|.local [.align N] .type name[size]` (or `[]` for `.extern`).
fn var_decl(line: u32, col: u32, s: &str) -> Result<VarDecl, ParseError> {
    let toks: Vec<&str> = s.split_whitespace().collect();
    let mut align = 0;
    let mut ty = None;
    let mut name = None;
    let mut k = 0;
    while k < toks.len() {
        match toks[k] {
            ".extern" | ".shared" | ".local" | ".visible" | ".weak" => {}
            ".align" => {
                k += 1;
                align = toks
                    .get(k)
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| ParseError {
                        line,
                        column: col,
                        message: format!("bad .align in `{s}`"),
                    })?;
            }
            t if t.starts_with('.') => {
                ty = Some(Ty::parse(&t[1..]).ok_or_else(|| ParseError {
                    line,
                    column: col,
                    message: format!("unknown type `{t}` in `{s}`"),
                })?)
            }
            t if t.contains('=') || t == "=" => {
                return err(
                    line,
                    col,
                    format!("initialized variables are not supported: `{s}`"),
                );
            }
            t => name = Some(t.to_string()),
        }
        k += 1;
    }
    let (Some(ty), Some(name)) = (ty, name) else {
        return err(line, col, format!("cannot parse the declaration `{s}`"));
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
                    column: col,
                    message: format!("bad array size in `{s}`"),
                })? * esize,
            )
        };
        Ok(VarDecl {
            name: name[..open].to_string(),
            align,
            bytes: n,
        })
    } else {
        Ok(VarDecl {
            name,
            align,
            bytes: Some(esize),
        })
    }
}

/// Parses one `.param` declaration of an entry's parameter list.
fn param_decl(line: u32, col: u32, p: &str) -> Result<ParamDecl, ParseError> {
    let bad = |m: &str| ParseError {
        line,
        column: col,
        message: format!("{m} in parameter `{p}`"),
    };
    let toks: Vec<&str> = p.split_whitespace().collect();
    if toks.first() != Some(&".param") {
        return Err(bad("expected `.param`"));
    }
    let (mut ty, mut name, mut align) = (None, None, 0u32);
    let mut k = 1;
    while k < toks.len() {
        let t = toks[k];
        match t {
            ".align" => {
                k += 1;
                align = toks
                    .get(k)
                    .and_then(|x| x.parse().ok())
                    .ok_or_else(|| bad("bad .align"))?;
            }
            // `.ptr .global .align 16` attributes of pointer parameters
            ".ptr" | ".global" | ".shared" | ".const" | ".local" => {}
            _ if t.starts_with('.') => {
                ty = Some(ParamType::parse(&t[1..]).ok_or_else(|| bad("unsupported type"))?);
            }
            _ => name = Some(t),
        }
        k += 1;
    }
    let (Some(ty), Some(name)) = (ty, name) else {
        return Err(bad("missing type or name"));
    };
    if let Some(open) = name.find('[') {
        let n: u32 = name[open + 1..]
            .trim_end_matches(']')
            .trim()
            .parse()
            .map_err(|_| bad("bad array size"))?;
        return Ok(ParamDecl {
            name: name[..open].to_string(),
            ty: ParamType::Bytes {
                size: n * ty.size(),
                align: if align == 0 { ty.size() } else { align },
            },
        });
    }
    Ok(ParamDecl {
        name: name.to_string(),
        ty,
    })
}

/// One parsed entry (its program, or the first instruction the simulator does not implement).
pub(crate) struct ParsedEntry {
    pub name: String,
    pub params: Vec<ParamDecl>,
    pub maxntid: Option<[u32; 3]>,
    pub reqntid: Option<[u32; 3]>,
    pub static_smem: u32,
    pub local_bytes: u32,
    pub program: Result<Program, Unsupported>,
}

pub(crate) struct ParsedModule {
    pub target: Option<String>,
    pub entries: Vec<ParsedEntry>,
}

/// An entry being collected: its header and body statements.
struct EntrySrc {
    name: String,
    params: Vec<ParamDecl>,
    maxntid: Option<[u32; 3]>,
    reqntid: Option<[u32; 3]>,
    /// Module-level shared declarations visible to it.
    module_shared: usize,
    body: Vec<(u32, u32, String)>,
}

/// Parses the entry header `.visible .entry name(params) directives`.
fn entry_header(line: u32, col: u32, s: &str, at: usize) -> Result<EntrySrc, ParseError> {
    let rest = &s[at + 6..];
    let open = rest.find('(').unwrap_or(rest.len());
    let name = rest[..open].trim().to_string();
    if name.is_empty() {
        return err(line, col, format!("entry without a name: `{s}`"));
    }
    let close = rest.rfind(')').unwrap_or(rest.len());
    let mut params = Vec::new();
    if open < close {
        for p in split_args(&rest[open + 1..close]) {
            if !p.is_empty() {
                params.push(param_decl(line, col, p)?);
            }
        }
    }
    let tail = if close < rest.len() {
        &rest[close + 1..]
    } else {
        ""
    };
    let (mut maxntid, mut reqntid) = (None, None);
    let mut toks = tail.split_whitespace().peekable();
    while let Some(t) = toks.next() {
        let mut dims = || {
            let mut d = [1u32; 3];
            let mut k = 0;
            while let Some(n) = toks
                .peek()
                .and_then(|x| x.trim_end_matches(',').parse::<u32>().ok())
            {
                if k < 3 {
                    d[k] = n;
                }
                k += 1;
                toks.next();
            }
            d
        };
        match t {
            ".maxntid" => maxntid = Some(dims()),
            ".reqntid" => reqntid = Some(dims()),
            ".minnctapersm" | ".maxnctapersm" | ".maxnreg" | ".maxclusterrank" => {
                dims();
            }
            ".noreturn" => {}
            _ => return err(line, col, format!("unsupported entry directive `{t}`")),
        }
    }
    Ok(EntrySrc {
        name,
        params,
        maxntid,
        reqntid,
        module_shared: 0,
        body: Vec::new(),
    })
}

/// Parses a whole module.
pub(crate) fn parse_module(text: &str) -> Result<ParsedModule, ParseError> {
    let stmts = statements(text);
    let mut target = None;
    let mut module_shared: Vec<VarDecl> = Vec::new();
    let mut srcs: Vec<EntrySrc> = Vec::new();
    let mut cur: Option<EntrySrc> = None;
    let mut skipping = false;
    for st in &stmts {
        let (line, col, s) = (st.line, st.col, st.text.as_str());
        match st.kind {
            Kind::Module => {
                if let Some(t) = s.strip_prefix(".target") {
                    target = t.split(',').next().map(|x| x.trim().to_string());
                    continue;
                }
                if s.starts_with(".version") || s.starts_with(".file") {
                    continue;
                }
                if s.starts_with(".address_size") {
                    if !s.ends_with("64") {
                        return err(line, col, "only .address_size 64 is supported");
                    }
                    continue;
                }
                if s.contains(".func") {
                    // a device function declaration (prototype): calls to it are unsupported
                    continue;
                }
                let first = s
                    .split_whitespace()
                    .find(|t| ![".visible", ".extern", ".weak"].contains(t));
                if first == Some(".shared") {
                    module_shared.push(var_decl(line, col, s)?);
                    continue;
                }
                return err(
                    line,
                    col,
                    format!("unsupported module-level statement `{s}`"),
                );
            }
            Kind::Header => {
                if let Some(at) = s.find(".entry") {
                    let mut e = entry_header(line, col, s, at)?;
                    e.module_shared = module_shared.len();
                    cur = Some(e);
                } else {
                    // `.func` bodies, `.section` debug data: not run
                    skipping = true;
                }
            }
            Kind::EndBody => {
                if let Some(e) = cur.take() {
                    srcs.push(e);
                }
                skipping = false;
            }
            Kind::Body => {
                if skipping {
                    continue;
                }
                let Some(e) = cur.as_mut() else {
                    return err(line, col, format!("statement outside an entry: `{s}`"));
                };
                e.body.push((line, col, s.to_string()));
            }
        }
    }
    if let Some(e) = cur.take() {
        srcs.push(e);
    }
    let mut entries = Vec::new();
    for src in srcs {
        entries.push(entry(src, &module_shared)?);
    }
    Ok(ParsedModule { target, entries })
}

/// Declarations and instructions of one entry.
fn entry(src: EntrySrc, module_shared: &[VarDecl]) -> Result<ParsedEntry, ParseError> {
    let mut shared: HashMap<String, u64> = HashMap::new();
    let mut shared_syms: Vec<Symbol> = Vec::new();
    let mut static_end = 0u32;
    let mut externs: Vec<(String, u32)> = Vec::new();
    let mut local: HashMap<String, u64> = HashMap::new();
    let mut local_end = 0u32;
    let mut place_shared = |d: &VarDecl,
                            externs: &mut Vec<(String, u32)>,
                            line: u32,
                            col: u32|
     -> Result<(), ParseError> {
        match d.bytes {
            None => externs.push((d.name.clone(), d.align)),
            Some(n) => {
                if shared.contains_key(&d.name) {
                    return err(line, col, format!("`{}` is declared twice", d.name));
                }
                static_end = align_up(static_end, d.align);
                shared.insert(d.name.clone(), static_end as u64);
                shared_syms.push(Symbol {
                    name: d.name.clone(),
                    start: static_end,
                    bytes: Some(n),
                });
                static_end += n;
            }
        }
        Ok(())
    };
    for d in &module_shared[..src.module_shared] {
        place_shared(d, &mut externs, 1, 1)?;
    }
    let mut regs = Regs::default();
    let mut body: Vec<(u32, u32, String)> = Vec::new();
    let mut labels: HashMap<String, u32> = HashMap::new();
    for (line, col, s) in &src.body {
        let (line, col) = (*line, *col);
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
            let (tyt, names) = d
                .split_once(char::is_whitespace)
                .ok_or_else(|| ParseError {
                    line,
                    column: col,
                    message: format!("bad .reg `{s}`"),
                })?;
            let ty = Ty::parse(tyt.trim_start_matches('.')).ok_or_else(|| ParseError {
                line,
                column: col,
                message: format!("bad .reg type in `{s}`"),
            })?;
            for n in names.split(',') {
                let n = n.trim().trim_start_matches('%');
                if let Some(lt) = n.find('<') {
                    let c: u32 =
                        n[lt + 1..]
                            .trim_end_matches('>')
                            .parse()
                            .map_err(|_| ParseError {
                                line,
                                column: col,
                                message: format!("bad register range `{n}`"),
                            })?;
                    regs.ranges.insert(n[..lt].to_string(), (c, ty));
                } else {
                    regs.singles.insert(n.to_string(), ty);
                }
            }
            continue;
        }
        if s.starts_with(".shared") {
            let d = var_decl(line, col, s)?;
            if d.bytes.is_none() {
                return err(line, col, "a .shared array inside an entry needs a size");
            }
            place_shared(&d, &mut externs, line, col)?;
            continue;
        }
        if s.starts_with(".local") {
            let d = var_decl(line, col, s)?;
            let Some(n) = d.bytes else {
                return err(line, col, "a .local array needs a size");
            };
            local_end = align_up(local_end, d.align);
            local.insert(d.name, local_end as u64);
            local_end += n;
            continue;
        }
        if s.starts_with(".pragma") || s.starts_with(".loc") {
            continue;
        }
        if s.starts_with('.') {
            return err(line, col, format!("unsupported directive `{s}`"));
        }
        body.push((line, col, s.to_string()));
    }
    let dyn_align = externs.iter().map(|e| e.1).max().unwrap_or(16).max(16);
    let dyn_offset = align_up(static_end, dyn_align);
    if let Some((name, _)) = externs.first() {
        shared_syms.push(Symbol {
            name: name.clone(),
            start: dyn_offset,
            bytes: None,
        });
    }
    for (name, _) in &externs {
        shared.insert(name.clone(), dyn_offset as u64);
    }
    let mut params: Vec<(String, ParamType, u32)> = Vec::new();
    let mut param_bytes = 0u32;
    for p in &src.params {
        param_bytes = align_up(param_bytes, p.ty.align());
        params.push((p.name.clone(), p.ty, param_bytes));
        param_bytes += p.ty.size();
    }
    let param_off: HashMap<String, u32> = params.iter().map(|(n, _, o)| (n.clone(), *o)).collect();
    let mut cx = Ctx {
        regs: &mut regs,
        shared: &shared,
        local: &local,
        params: &param_off,
        labels: &labels,
    };
    let mut insts = Vec::with_capacity(body.len());
    let mut unsupported = None;
    for (line, col, s) in &body {
        match decode::decode(&mut cx, *line, s) {
            Ok(i) => insts.push(i),
            Err(DecodeError::Syntax { message, token }) => {
                let column = token
                    .and_then(|t| s.find(t.as_str()))
                    .map(|i| *col + i as u32)
                    .unwrap_or(*col);
                return err(*line, column, message);
            }
            Err(DecodeError::Unsupported(reason)) => {
                if unsupported.is_none() {
                    unsupported = Some(Unsupported {
                        line: *line,
                        instruction: s.clone(),
                        reason,
                    });
                }
            }
        }
    }
    let program = match unsupported {
        Some(u) => Err(u),
        None => Ok(Program {
            params,
            param_bytes,
            nregs: regs.list.len() as u32,
            insts,
            static_smem: static_end,
            dyn_offset,
            shared_syms,
            local_bytes: local_end,
            maxntid: src.maxntid,
            reqntid: src.reqntid,
        }),
    };
    Ok(ParsedEntry {
        name: src.name,
        params: src.params,
        maxntid: src.maxntid,
        reqntid: src.reqntid,
        static_smem: static_end,
        local_bytes: local_end,
        program,
    })
}
