//! A tracepoint's record layout as tracefs publishes it
//! (`events/GROUP/NAME/format`): its id and each field's offset, size and
//! signedness. Read at run time, so that no offset is assumed from one
//! kernel version.
//!
//! Pure text parsing; it must never open a file (the tracer reads them).

use crate::error::WhyError;

/// One field of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
    /// `__data_loc`: the field holds `offset | length << 16` of bytes
    /// stored later in the record (variable-length strings).
    pub data_loc: bool,
}

/// A tracepoint's id and fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    pub event: String,
    pub id: u64,
    pub fields: Vec<Field>,
}

impl Format {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Parses a format file's text; `event` names it in errors.
pub fn parse(event: &str, text: &str) -> Result<Format, WhyError> {
    let error = |cause: String| WhyError::Format {
        event: event.to_string(),
        cause,
    };
    let id = text
        .lines()
        .find_map(|l| l.strip_prefix("ID:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| error("no ID line".into()))?;
    let fields = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("field:"))
        .map(|l| field(l).ok_or_else(|| error(format!("unreadable field line {l:?}"))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Format {
        event: event.to_string(),
        id,
        fields,
    })
}

/// `char prev_comm[16];<TAB>offset:8;<TAB>size:16;<TAB>signed:0;` (after `field:`).
fn field(line: &str) -> Option<Field> {
    let mut parts = line.split(';').map(str::trim);
    let declaration = parts.next()?;
    let mut value =
        |key: &str| -> Option<usize> { parts.next()?.strip_prefix(key)?.trim().parse().ok() };
    let (offset, size, signed) = (value("offset:")?, value("size:")?, value("signed:")?);
    let last = declaration.split_whitespace().last()?;
    let name = last.split('[').next()?.to_string();
    Some(Field {
        name,
        offset,
        size,
        signed: signed != 0,
        data_loc: declaration.starts_with("__data_loc"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH: &str = "name: sched_switch
ID: 330
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:__data_loc char[] comm;\toffset:8;\tsize:4;\tsigned:0;

print fmt: \"prev_comm=%s\", REC->prev_comm
";

    #[test]
    fn a_format_file_gives_the_id_and_each_field() {
        let f = parse("sched/sched_switch", SWITCH).unwrap();
        assert_eq!(f.id, 330);
        assert_eq!(f.fields.len(), 5);
        let comm = f.field("prev_comm").unwrap();
        assert_eq!((comm.offset, comm.size, comm.signed), (8, 16, false));
        assert!(f.field("prev_state").unwrap().signed);
        assert!(f.field("comm").unwrap().data_loc);
    }

    #[test]
    fn a_file_without_an_id_is_refused() {
        assert!(parse("x/y", "format:\n").is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_is_refused_without_panicking(text in ".{0,400}") {
            let _ = parse("x/y", &text);
        }

        #[test]
        fn a_written_field_reads_back(
            name in "[a-z_]{1,20}", offset in 0usize..4096, size in 1usize..64, signed: bool,
        ) {
            let text = format!(
                "ID: 7\nformat:\n\tfield:int {name};\toffset:{offset};\tsize:{size};\tsigned:{};\n",
                signed as u8
            );
            let f = parse("x/y", &text).unwrap();
            proptest::prop_assert_eq!(&f.fields[0], &Field { name, offset, size, signed, data_loc: false });
        }
    }
}
