//! CSV records from a stream of chunks (csv-core's state machine, resumable at any byte),
//! with the physical line each record starts on, which fields were quoted (`""` is the
//! empty string, an empty field NULL), and the delimiter sniffed from a sample.

use csv_core::{ReadRecordResult, Reader, ReaderBuilder};

/// Delimiters sniffed, in order of preference on a tie.
const DELIMITERS: [u8; 4] = [b',', b'\t', b';', b'|'];

/// Records a sniff looks at per candidate delimiter.
const SNIFF_RECORDS: usize = 100;

/// What [`Splitter::next`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The input ran out inside a record or between records: give more.
    NeedInput,
    /// A whole record: its fields are [`Splitter::field`] `0..`[`Splitter::len`].
    Record,
    /// The end of the data (only after input was ended with an empty slice).
    End,
}

/// Where [`Quotes`] is in a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QuoteState {
    /// Before a field's first byte.
    FieldStart,
    /// In a field that did not start with a quote.
    Unquoted,
    /// In a field whose quoted part closed and data followed (`"a"b`): csv-core reads
    /// on as unquoted data.
    AfterClose,
    /// In a quoted field.
    Quoted,
    /// Just after a quote in a quoted field: its end, or the first of a doubled quote.
    QuoteInQuoted,
    /// Past the record's line end.
    Done,
}

/// A record's quoting, read from its raw bytes as csv-core reads them (a quote opens a
/// field only as its first byte; a doubled quote inside is one quote; csv-core's own
/// output cannot tell `""` from an empty field): which fields started with a quote,
/// and the line a quoted field still open at the end of the data opened on.
#[derive(Debug)]
struct Quotes {
    state: QuoteState,
    /// Per field so far: it started with a quote.
    quoted: Vec<bool>,
    /// Line ends read so far (inside quoted fields: the only place a record has them).
    newlines: u64,
    /// `newlines` when the last quoted field opened.
    opened_at: u64,
    /// `newlines` when a quote came after a quoted field's closing quote and data
    /// (`"ab"c"`): csv-core reads it as data, PostgreSQL's COPY as opening a quoted
    /// part again (and then fails at the end of the file); records merge silently
    /// either way, so Tarn refuses the file. (`"ab"c` alone is `abc` in both.)
    after_close: Option<u64>,
}

impl Quotes {
    fn new() -> Self {
        Self {
            state: QuoteState::FieldStart,
            quoted: vec![false],
            newlines: 0,
            opened_at: 0,
            after_close: None,
        }
    }

    fn reset(&mut self) {
        self.state = QuoteState::FieldStart;
        self.quoted.clear();
        self.quoted.push(false);
        self.newlines = 0;
        self.opened_at = 0;
        self.after_close = None;
    }

    fn next_field(&mut self) {
        self.quoted.push(false);
        self.state = QuoteState::FieldStart;
    }

    /// Reads the record's next raw bytes.
    fn feed(&mut self, bytes: &[u8], delimiter: u8) {
        let mut i = 0;
        while i < bytes.len() {
            match self.state {
                QuoteState::Done => return,
                QuoteState::FieldStart => {
                    let b = bytes[i];
                    i += 1;
                    match b {
                        b'"' => {
                            if let Some(q) = self.quoted.last_mut() {
                                *q = true;
                            }
                            self.opened_at = self.newlines;
                            self.state = QuoteState::Quoted;
                        }
                        b'\r' | b'\n' => self.state = QuoteState::Done,
                        b if b == delimiter => self.next_field(),
                        _ => self.state = QuoteState::Unquoted,
                    }
                }
                QuoteState::Unquoted => {
                    match memchr::memchr3(delimiter, b'\r', b'\n', &bytes[i..]) {
                        None => i = bytes.len(),
                        Some(k) => {
                            let b = bytes[i + k];
                            i += k + 1;
                            if b == delimiter {
                                self.next_field();
                            } else {
                                self.state = QuoteState::Done;
                            }
                        }
                    }
                }
                QuoteState::AfterClose => {
                    let b = bytes[i];
                    i += 1;
                    match b {
                        b'"' => {
                            self.after_close.get_or_insert(self.newlines);
                        }
                        b'\r' | b'\n' => self.state = QuoteState::Done,
                        b if b == delimiter => self.next_field(),
                        _ => {}
                    }
                }
                QuoteState::Quoted => match memchr::memchr2(b'"', b'\n', &bytes[i..]) {
                    None => i = bytes.len(),
                    Some(k) => {
                        let b = bytes[i + k];
                        i += k + 1;
                        if b == b'"' {
                            self.state = QuoteState::QuoteInQuoted;
                        } else {
                            self.newlines += 1;
                        }
                    }
                },
                QuoteState::QuoteInQuoted => {
                    let b = bytes[i];
                    i += 1;
                    match b {
                        b'"' => self.state = QuoteState::Quoted,
                        b'\r' | b'\n' => self.state = QuoteState::Done,
                        b if b == delimiter => self.next_field(),
                        // `"a"b`: csv-core reads on as unquoted data.
                        _ => self.state = QuoteState::AfterClose,
                    }
                }
            }
        }
    }

    /// Field `i` started with a quote.
    fn quoted(&self, i: usize) -> bool {
        self.quoted.get(i).copied().unwrap_or(false)
    }
}

/// Splits CSV bytes into records.
pub(crate) struct Splitter {
    core: Reader,
    delimiter: u8,
    /// The last record's (or the one being read's) quoting, when `quotes_read`.
    quotes: Quotes,
    /// `quotes` has read all of the record so far: always for a record that spans
    /// inputs (the earlier ones are gone when it ends), else only for a record with an
    /// empty field (the only ones whose quoting matters).
    quotes_read: bool,
    out: Vec<u8>,
    ends: Vec<usize>,
    out_len: usize,
    ends_len: usize,
    /// Physical line (1-based) the record being read starts on.
    record_line: u64,
    in_record: bool,
    max_record_bytes: usize,
    max_fields: usize,
    /// An empty line between records is a record of one empty field (NULL): set for a
    /// file whose header has one column, where that is how a NULL is written.
    empty_lines_are_rows: bool,
    /// The last byte consumed, so that a `\n` ending a `\r\n` is not an empty line.
    prev: u8,
}

impl Splitter {
    /// A splitter refusing records over `max_record_bytes` bytes of field data or
    /// `max_fields` fields (so that no line, however long, grows memory past them).
    pub(crate) fn new(delimiter: u8, max_record_bytes: usize, max_fields: usize) -> Self {
        Self {
            core: ReaderBuilder::new().delimiter(delimiter).build(),
            delimiter,
            quotes: Quotes::new(),
            quotes_read: false,
            out: vec![0; 4096],
            ends: vec![0; 64],
            out_len: 0,
            ends_len: 0,
            record_line: 1,
            in_record: false,
            max_record_bytes,
            max_fields,
            empty_lines_are_rows: false,
            prev: 0,
        }
    }

    /// Makes an empty line between records a record of one empty field (NULL), as
    /// PostgreSQL's `COPY … CSV` reads a one-column file: a one-column export writes a
    /// NULL so. A file of several columns skips empty lines (none can be its row).
    pub(crate) fn set_empty_lines_are_rows(&mut self, on: bool) {
        self.empty_lines_are_rows = on;
    }

    /// The line the last record (or the one being read) starts on.
    pub(crate) fn line(&self) -> u64 {
        self.record_line
    }

    /// Fields of the last record.
    pub(crate) fn len(&self) -> usize {
        self.ends_len
    }

    /// Bytes of the last record's fields.
    pub(crate) fn record_bytes(&self) -> usize {
        self.out_len
    }

    /// Field `i` of the last record.
    pub(crate) fn field(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.out[start..self.ends[i]]
    }

    /// Field `i` of the last record is `""`: the empty string, where an empty field
    /// without quotes is NULL (PostgreSQL's COPY reads CSV so).
    pub(crate) fn quoted_empty(&self, i: usize) -> bool {
        self.quotes_read && self.field(i).is_empty() && self.quotes.quoted(i)
    }

    /// Reads from `input` (an empty slice ends the data) up to the end of the next
    /// record. Returns the bytes consumed and what was found.
    pub(crate) fn next(&mut self, input: &[u8]) -> Result<(usize, Step), String> {
        let r = self.next_step(input);
        if let Ok((n, _)) = r
            && n > 0
        {
            self.prev = input[n - 1];
        }
        r
    }

    fn next_step(&mut self, mut input: &[u8]) -> Result<(usize, Step), String> {
        let whole = input;
        if input.is_empty()
            && self.in_record
            && self.quotes_read
            && self.quotes.state == QuoteState::Quoted
        {
            // csv-core would end the record here, with the rest of the file in the field.
            // A record in progress at the end has spanned inputs, so `quotes` read it.
            return Err(format!(
                "line {}: unterminated CSV quoted field",
                self.record_line + self.quotes.opened_at
            ));
        }
        let mut consumed = 0;
        if !self.in_record {
            self.out_len = 0;
            self.ends_len = 0;
            // Line ends between records go through one at a time, so the record's line
            // is known when its first byte arrives (csv-core skips empty lines).
            let mut prev = self.prev;
            while let Some(&b) = input.first() {
                if b != b'\n' && b != b'\r' {
                    break;
                }
                let line = self.core.line();
                let (_, n, _, _) =
                    self.core
                        .read_record(&input[..1], &mut self.out, &mut self.ends);
                if n == 0 {
                    break;
                }
                consumed += n;
                input = &input[n..];
                // Between records, a line end that is not the `\n` of a `\r\n` starts
                // and ends an empty line.
                if self.empty_lines_are_rows && !(b == b'\n' && prev == b'\r') {
                    self.record_line = line;
                    self.ends[0] = 0;
                    self.ends_len = 1;
                    self.quotes_read = false;
                    return Ok((consumed, Step::Record));
                }
                prev = b;
            }
            if input.is_empty() && consumed > 0 {
                return Ok((consumed, Step::NeedInput));
            }
            self.record_line = self.core.line();
            self.in_record = true;
            self.quotes_read = false;
        }
        let start = consumed;
        loop {
            let (res, nin, nout, nend) = self.core.read_record(
                input,
                &mut self.out[self.out_len..],
                &mut self.ends[self.ends_len..],
            );
            consumed += nin;
            input = &input[nin..];
            self.out_len += nout;
            self.ends_len += nend;
            match res {
                ReadRecordResult::InputEmpty => {
                    if self.out_len > self.max_record_bytes {
                        return Err(format!(
                            "line {}: a row longer than {} MiB (an unterminated quote?)",
                            self.record_line,
                            self.max_record_bytes >> 20
                        ));
                    }
                    if !self.quotes_read {
                        self.quotes.reset();
                        self.quotes_read = true;
                    }
                    self.quotes.feed(&whole[start..consumed], self.delimiter);
                    return Ok((consumed, Step::NeedInput));
                }
                ReadRecordResult::OutputFull => {
                    if self.out_len > self.max_record_bytes {
                        return Err(format!(
                            "line {}: a row longer than {} MiB (an unterminated quote?)",
                            self.record_line,
                            self.max_record_bytes >> 20
                        ));
                    }
                    let n = self.out.len() * 2;
                    self.out.resize(n, 0);
                }
                ReadRecordResult::OutputEndsFull => {
                    if self.ends.len() >= self.max_fields {
                        let most = self.max_fields.saturating_sub(1);
                        return Err(format!(
                            "line {}: more than {most} fields; a table can have at most \
                             {most} columns",
                            self.record_line
                        ));
                    }
                    let n = (self.ends.len() * 2).min(self.max_fields.max(1));
                    self.ends.resize(n, 0);
                }
                ReadRecordResult::Record => {
                    self.in_record = false;
                    let raw = &whole[start..consumed];
                    if self.quotes_read {
                        self.quotes.feed(raw, self.delimiter);
                    } else if (0..self.ends_len).any(|i| self.field(i).is_empty())
                        || memchr::memchr(b'"', raw).is_some()
                    {
                        self.quotes.reset();
                        self.quotes.feed(raw, self.delimiter);
                        self.quotes_read = true;
                    }
                    if self.quotes_read
                        && let Some(n) = self.quotes.after_close
                    {
                        return Err(format!(
                            "line {}: a quote after the closing quote of a quoted field and data \
                             (a quote inside a quoted field is written twice: \"\")",
                            self.record_line + n
                        ));
                    }
                    return Ok((consumed, Step::Record));
                }
                ReadRecordResult::End => {
                    self.in_record = false;
                    return Ok((consumed, Step::End));
                }
            }
        }
    }
}

/// The delimiter of `sample` (`eof`: the sample is the whole file): the candidate that
/// splits the header into the most fields while every following record has as many.
/// Quotes are `"` (doubled inside quoted fields).
pub(crate) fn sniff_delimiter(sample: &[u8], eof: bool) -> u8 {
    let mut best = (b',', 1usize);
    for d in DELIMITERS {
        let mut s = Splitter::new(d, usize::MAX, usize::MAX);
        let mut rest = sample;
        let mut header = None;
        let mut consistent = true;
        let mut records = 0;
        while records < SNIFF_RECORDS {
            let Ok((n, step)) = s.next(rest) else { break };
            rest = &rest[n..];
            match step {
                Step::Record => {
                    records += 1;
                    match header {
                        None => header = Some(s.len()),
                        Some(h) if h != s.len() => {
                            consistent = false;
                            break;
                        }
                        Some(_) => {}
                    }
                }
                Step::End => break,
                Step::NeedInput if rest.is_empty() => {
                    if !eof {
                        break;
                    }
                    let Ok((_, step)) = s.next(&[]) else { break };
                    if step == Step::Record && header.is_some_and(|h| h != s.len()) {
                        consistent = false;
                    }
                    break;
                }
                Step::NeedInput => {}
            }
        }
        if let Some(h) = header
            && consistent
            && h > best.1
        {
            best = (d, h);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(data: &[u8], chunk: usize) -> Vec<(u64, Vec<String>)> {
        let mut s = Splitter::new(b',', 1 << 20, 100);
        let mut out = Vec::new();
        let mut pending: &[u8] = &[];
        let mut chunks = data.chunks(chunk.max(1));
        let mut ended = false;
        loop {
            if pending.is_empty() {
                match chunks.next() {
                    Some(c) => pending = c,
                    None if ended => break,
                    None => ended = true,
                }
            }
            let (n, step) = s.next(pending).expect("split");
            pending = &pending[n..];
            match step {
                Step::Record => out.push((
                    s.line(),
                    (0..s.len())
                        .map(|i| String::from_utf8_lossy(s.field(i)).into_owned())
                        .collect(),
                )),
                Step::End => break,
                Step::NeedInput => {}
            }
        }
        out
    }

    #[test]
    fn lines_survive_any_chunking() {
        let data = b"a,b\r\n1,\"x\ny\"\r\n\r\n\n2,z\n3,\"q\"\"\"";
        for chunk in 1..data.len() + 1 {
            let got = records(data, chunk);
            assert_eq!(
                got,
                vec![
                    (1, vec!["a".into(), "b".into()]),
                    (2, vec!["1".into(), "x\ny".into()]),
                    (6, vec!["2".into(), "z".into()]),
                    (7, vec!["3".into(), "q\"".into()]),
                ],
                "chunk {chunk}"
            );
        }
    }

    /// The records of `data` fed in chunks of `chunk` bytes, with `""` for a quoted
    /// empty field and `-` for an empty one; or the error.
    fn marked(data: &[u8], chunk: usize) -> Result<Vec<Vec<String>>, String> {
        let mut s = Splitter::new(b',', 1 << 20, 100);
        let mut out = Vec::new();
        let mut pending: &[u8] = &[];
        let mut chunks = data.chunks(chunk.max(1));
        loop {
            if pending.is_empty()
                && let Some(c) = chunks.next()
            {
                pending = c;
            }
            let (n, step) = s.next(pending)?;
            pending = &pending[n..];
            match step {
                Step::Record => out.push(
                    (0..s.len())
                        .map(|i| match (s.quoted_empty(i), s.field(i)) {
                            (true, _) => "\"\"".to_string(),
                            (false, b"") => "-".to_string(),
                            (false, f) => String::from_utf8_lossy(f).into_owned(),
                        })
                        .collect(),
                ),
                Step::End => return Ok(out),
                Step::NeedInput => {}
            }
        }
    }

    #[test]
    fn quoted_empty_fields_differ_from_empty_ones_in_any_chunking() {
        let data = b"a,b,c\n\"\",,x\r\n,\"\",\"\"\n\"\"\"\",\"y\nz\",\n\"a\"b,\"\"\n";
        let want: Vec<Vec<String>> = [
            vec!["a", "b", "c"],
            vec!["\"\"", "-", "x"],
            vec!["-", "\"\"", "\"\""],
            vec!["\"\"", "y\nz", "-"],
            vec!["ab", "\"\""],
        ]
        .iter()
        .map(|r| r.iter().map(|f| f.to_string()).collect())
        .collect();
        // `""""` is one quote, not empty; `"a"b` reads on unquoted.
        let mut want = want;
        want[3][0] = "\"".to_string();
        for chunk in 1..data.len() + 1 {
            assert_eq!(marked(data, chunk).as_ref(), Ok(&want), "chunk {chunk}");
        }
    }

    /// A one-column file's empty lines are rows of one empty field (NULL), with their
    /// lines, whatever the line ends (`\n`, `\r\n`, `\r`) and however the bytes arrive.
    #[test]
    fn empty_lines_of_a_one_column_file_are_rows_in_any_chunking() {
        let data = b"\nt\n\nx\r\n\r\n\"\"\r\r\n\ny";
        // Lines are counted at `\n` (as every line a message names), so the empty line after
        // `""\r` is still on line 6.
        let want: Vec<(u64, String)> = [
            (3, "-"),
            (4, "x"),
            (5, "-"),
            (6, "\"\""),
            (6, "-"),
            (7, "-"),
            (8, "y"),
        ]
        .iter()
        .map(|(l, f)| (*l, f.to_string()))
        .collect();
        for chunk in 1..data.len() + 1 {
            let mut s = Splitter::new(b',', 1 << 20, 100);
            let mut got = Vec::new();
            let mut header = false;
            let mut chunks = data.chunks(chunk);
            let mut pending: &[u8] = &[];
            loop {
                if pending.is_empty()
                    && let Some(c) = chunks.next()
                {
                    pending = c;
                }
                let (n, step) = s.next(pending).expect("split");
                pending = &pending[n..];
                match step {
                    Step::Record if !header => {
                        assert_eq!((s.line(), s.field(0)), (2, &b"t"[..]), "chunk {chunk}");
                        header = true;
                        s.set_empty_lines_are_rows(true);
                    }
                    Step::Record => {
                        assert_eq!(s.len(), 1, "chunk {chunk}");
                        let f = match (s.quoted_empty(0), s.field(0)) {
                            (true, _) => "\"\"".to_string(),
                            (false, b"") => "-".to_string(),
                            (false, f) => String::from_utf8_lossy(f).into_owned(),
                        };
                        got.push((s.line(), f));
                    }
                    Step::End => break,
                    Step::NeedInput => {}
                }
            }
            assert_eq!(got, want, "chunk {chunk}");
        }
    }

    #[test]
    fn an_unterminated_quote_names_the_line_it_opens_on_in_any_chunking() {
        for (data, line) in [
            (&b"a,b\n1,\"abc\n2,def\n"[..], 2),
            (b"a,b\n1,x\n2,\"abc", 3),
            (b"a,b,c\n1,\"x\ny\",\"open\nmore\n", 3),
            (b"a,b\n1,\"ab\"\"\n", 2),
            (b"a\n\"", 2),
        ] {
            let want = format!("line {line}: unterminated CSV quoted field");
            for chunk in 1..data.len() + 1 {
                assert_eq!(marked(data, chunk), Err(want.clone()), "chunk {chunk}");
            }
        }
        for data in [&b"a,b\n1,\"abc\""[..], b"a\n\"x\"\"\"\r\n", b"a\n\"\""] {
            for chunk in 1..data.len() + 1 {
                assert!(marked(data, chunk).is_ok(), "{data:?} chunk {chunk}");
            }
        }
    }

    #[test]
    fn a_quote_after_a_closed_quote_and_data_is_refused_naming_its_line_in_any_chunking() {
        // Records that would merge silently (csv-core reads `"x"` then on as unquoted
        // data), and a quote closed before the field ends.
        for (data, line) in [
            (&b"a,b\n1,\"abc\n2,def\n3,\"x\"\n4,y\n"[..], 4),
            (b"a,b\n1,\"ab\"c\"\n2,x\n", 2),
            (b"a,b\n0,z\n1,\"ab\"c\"d\n", 3),
        ] {
            let want = format!(
                "line {line}: a quote after the closing quote of a quoted field and data (a \
                 quote inside a quoted field is written twice: \"\")"
            );
            for chunk in 1..data.len() + 1 {
                assert_eq!(marked(data, chunk), Err(want.clone()), "chunk {chunk}");
            }
        }
        // Doubled quotes, quoted fields ending at a delimiter, a line end or the end.
        for data in [
            &b"a,b\n1,\"x\"\"y\",\"z\"\r\n2,\"\"\n"[..],
            b"a,b\n\"1\",\"2\"",
            b"a\nab\"c\n",
            // As in PostgreSQL: `"ab"c` is `abc`.
            b"a,b\n0,z\n1,\"ab\"c\n",
        ] {
            for chunk in 1..data.len() + 1 {
                assert!(marked(data, chunk).is_ok(), "{data:?} chunk {chunk}");
            }
        }
    }

    #[test]
    fn sniffs_delimiters() {
        assert_eq!(sniff_delimiter(b"a,b,c\n1,2,3\n", true), b',');
        assert_eq!(sniff_delimiter(b"a;b;c\n1;2,5;3\n", true), b';');
        assert_eq!(sniff_delimiter(b"a\tb\n1\t\"x,y,z\"\n", true), b'\t');
        assert_eq!(sniff_delimiter(b"a|b\n1|2\n", true), b'|');
        assert_eq!(sniff_delimiter(b"single\n1\n", true), b',');
    }
}
