//! Schedule IR parser.

use super::{KernelClass, Schedule};
use crate::text::{Cursor, ParseError};

/// Parses `schedule <class> tile=[..] warps=N stages=N vector=N`.
pub fn parse(src: &str) -> Result<Schedule, ParseError> {
    let mut c = Cursor::new(src)?;
    c.expect_kw("schedule")?;
    let name = c.ident()?;
    let class = KernelClass::parse(&name)
        .ok_or_else(|| c.error(format!("unknown kernel class `{name}`")))?;
    let key = |c: &mut Cursor, k: &str| -> Result<(), ParseError> {
        c.expect_kw(k)?;
        c.expect("=")
    };
    key(&mut c, "tile")?;
    let tile = c.list("[", "]", |c| c.u32())?;
    key(&mut c, "warps")?;
    let warps = c.u32()?;
    key(&mut c, "stages")?;
    let stages = c.u32()?;
    key(&mut c, "vector")?;
    let vector = c.u32()?;
    if !c.at_end() {
        return Err(c.error(format!("unexpected {}", c.peek())));
    }
    Ok(Schedule {
        class,
        tile,
        warps,
        stages,
        vector,
    })
}
