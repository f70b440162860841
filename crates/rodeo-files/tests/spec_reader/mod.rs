//! An EventStorage version 5 reader written from `specs/eventstorage.md` alone, for the
//! writer's tests. It shares no code with rodeo-format (std only, bytes in, records out), so a
//! misreading of the spec in the library's reader cannot hide the same misreading in its writer.

#![allow(dead_code)]

/// What the spec says a version 5 file holds.
#[derive(Debug, Default)]
pub(crate) struct SpecFile {
    pub(crate) version: u32,
    pub(crate) file_number: u32,
    pub(crate) app_name: String,
    pub(crate) file_name_core: String,
    pub(crate) free_strings: Vec<String>,
    pub(crate) run_number: u32,
    pub(crate) detector_mask: u64,
    pub(crate) block_numbers: Vec<u32>,
    /// Each data block's bytes as stored.
    pub(crate) blocks: Vec<Vec<u8>>,
    pub(crate) end_events_in_file: u32,
    pub(crate) end_events_in_run: u32,
    pub(crate) end_status: u32,
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn word(&mut self) -> Result<u32, String> {
        let w = self
            .b
            .get(self.at..self.at + 4)
            .ok_or_else(|| format!("file ends at byte {} inside a word", self.b.len()))?;
        self.at += 4;
        Ok(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    }

    fn string(&mut self) -> Result<String, String> {
        let len = self.word()? as usize;
        let padded = len.div_ceil(4) * 4;
        let s = self
            .b
            .get(self.at..self.at + padded)
            .ok_or("string runs past the file")?;
        self.at += padded;
        // Writers pad with spaces; readers trim trailing spaces and NULs.
        let s = std::str::from_utf8(&s[..len]).map_err(|e| e.to_string())?;
        Ok(s.trim_end_matches([' ', '\0']).to_string())
    }
}

/// Parses a complete version 5 file; any deviation from the spec is an error.
pub(crate) fn read_v5(bytes: &[u8]) -> Result<SpecFile, String> {
    let mut c = Cursor { b: bytes, at: 0 };
    let mut f = SpecFile::default();
    if c.word()? != 0x1234_AAAA {
        return Err("no file start marker".into());
    }
    if c.word()? != 8 {
        return Err("file start size is not 8".into());
    }
    f.version = c.word()?;
    if f.version != 5 {
        return Err(format!("version {} is not 5", f.version));
    }
    f.file_number = c.word()?;
    let date = c.word()?;
    let time = c.word()?;
    let (day, month) = (date / 1_000_000, date / 10_000 % 100);
    if !(1..=31).contains(&day) || !(1..=12).contains(&month) || time / 10_000 > 23 {
        return Err(format!(
            "date {date} / time {time} are not DDMMYYYY / HHMMSS"
        ));
    }
    c.word()?;
    c.word()?;
    if c.word()? != 0x1234_AABB {
        return Err("no file name strings after the start record".into());
    }
    f.app_name = c.string()?;
    f.file_name_core = c.string()?;
    if c.word()? != 0x1234_AABC {
        return Err("no free strings in a version 5 file".into());
    }
    let n = c.word()?;
    for _ in 0..n {
        f.free_strings.push(c.string()?);
    }
    if c.word()? != 0x1234_BBBB {
        return Err("no run parameters".into());
    }
    if c.word()? != 10 {
        return Err("run parameters of a version 5 file are not 10 words".into());
    }
    f.run_number = c.word()?;
    c.word()?; // max events
    c.word()?; // recording enabled
    c.word()?; // trigger type
    let lo = c.word()?;
    let hi = c.word()?;
    f.detector_mask = u64::from(lo) | (u64::from(hi) << 32);
    c.word()?; // beam type
    c.word()?; // beam energy
    loop {
        match c.word()? {
            0x1234_CCCC => {
                if c.word()? != 4 {
                    return Err("data separator size is not 4".into());
                }
                f.block_numbers.push(c.word()?);
                let size = c.word()? as usize;
                let block =
                    c.b.get(c.at..c.at + size)
                        .ok_or("data block runs past the file")?;
                c.at += size;
                f.blocks.push(block.to_vec());
            }
            0x1234_DDDD => {
                if c.word()? != 10 {
                    return Err("end record size is not 10".into());
                }
                c.word()?; // date
                c.word()?; // time
                f.end_events_in_file = c.word()?;
                c.word()?; // MB in file
                f.end_events_in_run = c.word()?;
                c.word()?; // MB in run
                f.end_status = c.word()?;
                if c.word()? != 0x1234_EEEE {
                    return Err("end record does not close with 0x1234EEEE".into());
                }
                if c.at != bytes.len() {
                    return Err("bytes after the end record".into());
                }
                // Readers of ATLAS files seek to the last 40 bytes for the end record.
                let tail = &bytes[bytes.len() - 40..];
                if tail[..4] != 0x1234_DDDDu32.to_le_bytes() {
                    return Err("the last 40 bytes are not the end record".into());
                }
                return Ok(f);
            }
            other => return Err(format!("unexpected record marker {other:#010x}")),
        }
    }
}

/// The value of free string `tag=value`.
pub(crate) fn free(f: &SpecFile, tag: &str) -> Option<String> {
    f.free_strings
        .iter()
        .find_map(|s| s.strip_prefix(&format!("{tag}=")).map(str::to_string))
}

/// Little-endian words of a plain data block.
pub(crate) fn words(block: &[u8]) -> Vec<u32> {
    block
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}
