//! The text files users hand the simulator (CDF, flow, topology and HPCC `config.txt` files) as
//! other tools write them: a byte-order mark to skip, and lines to quote in errors.

/// `text` without a leading UTF-8 byte-order mark, which Windows editors write and none of the
/// formats has (it made the first line's first number "not a number", invisibly).
pub(crate) fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// Characters of a line an error message quotes.
const SHOWN_CHARS: usize = 80;

/// A line of a file for an error message: quoted with escapes and cut to a readable length. A
/// file on one line (flows joined, a CDF pasted) made one error line of hundreds of kilobytes,
/// and carriage returns printed raw overwrote the message on a terminal.
pub(crate) fn shown(line: &str) -> String {
    let (kept, more) = cut(line);
    let mut s = match more {
        0 => format!("{kept:?}"),
        n => format!("{kept:?}… ({n} more characters)"),
    };
    if line.contains('\r') {
        s.push_str("; its lines end in a carriage return alone: save it with LF or CRLF line ends");
    }
    s
}

/// A word of a file or setting for an error message, in single quotes: escaped, and cut to a
/// readable length like [`shown`]'s lines (a 5 000-digit flow size was quoted whole).
pub(crate) fn word(w: &str) -> String {
    let (kept, more) = cut(w);
    let escaped: String = kept.chars().flat_map(char::escape_debug).collect();
    match more {
        0 => format!("'{escaped}'"),
        n => format!("'{escaped}…' ({n} more characters)"),
    }
}

/// The first [`SHOWN_CHARS`] characters of `text`, and how many more there are.
fn cut(text: &str) -> (&str, usize) {
    match text.char_indices().nth(SHOWN_CHARS) {
        Some((end, _)) => (&text[..end], text[end..].chars().count()),
        None => (text, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_quoted_short_and_say_how_they_end() {
        assert_eq!(without_bom("\u{feff}0 0\n"), "0 0\n");
        assert_eq!(shown("1 2 x"), "\"1 2 x\"");
        let long = "7 ".repeat(100);
        assert_eq!(shown(&long), format!("{:?}… (120 more characters)", &long[..80]));
        assert_eq!(word("x1"), "'x1'");
        assert_eq!(word(&"9".repeat(5000)), format!("'{}…' (4920 more characters)", "9".repeat(80)));
        assert_eq!(word("a\u{1b}b"), "'a\\u{1b}b'");
        assert!(shown("1137\r1 8 3").starts_with("\"1137\\r1 8 3\"; its lines end in a carriage return alone"));
    }
}
