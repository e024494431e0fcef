//! CSV records from a stream of chunks (csv-core's state machine, resumable at any byte),
//! with the physical line each record starts on, and the delimiter sniffed from a
//! sample.

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

/// Splits CSV bytes into records.
pub(crate) struct Splitter {
    core: Reader,
    out: Vec<u8>,
    ends: Vec<usize>,
    out_len: usize,
    ends_len: usize,
    /// Physical line (1-based) the record being read starts on.
    record_line: u64,
    in_record: bool,
    max_record_bytes: usize,
    max_fields: usize,
}

impl Splitter {
    /// A splitter refusing records over `max_record_bytes` bytes of field data or
    /// `max_fields` fields (so that no line, however long, grows memory past them).
    pub(crate) fn new(delimiter: u8, max_record_bytes: usize, max_fields: usize) -> Self {
        Self {
            core: ReaderBuilder::new().delimiter(delimiter).build(),
            out: vec![0; 4096],
            ends: vec![0; 64],
            out_len: 0,
            ends_len: 0,
            record_line: 1,
            in_record: false,
            max_record_bytes,
            max_fields,
        }
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

    /// Reads from `input` (an empty slice ends the data) up to the end of the next
    /// record. Returns the bytes consumed and what was found.
    pub(crate) fn next(&mut self, mut input: &[u8]) -> Result<(usize, Step), String> {
        let mut consumed = 0;
        if !self.in_record {
            self.out_len = 0;
            self.ends_len = 0;
            // Line ends between records go through one at a time, so the record's line
            // is known when its first byte arrives (csv-core skips empty lines).
            while let Some(&b) = input.first() {
                if b != b'\n' && b != b'\r' {
                    break;
                }
                let (_, n, _, _) =
                    self.core
                        .read_record(&input[..1], &mut self.out, &mut self.ends);
                if n == 0 {
                    break;
                }
                consumed += n;
                input = &input[n..];
            }
            if input.is_empty() && consumed > 0 {
                return Ok((consumed, Step::NeedInput));
            }
            self.record_line = self.core.line();
            self.in_record = true;
        }
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

    #[test]
    fn sniffs_delimiters() {
        assert_eq!(sniff_delimiter(b"a,b,c\n1,2,3\n", true), b',');
        assert_eq!(sniff_delimiter(b"a;b;c\n1;2,5;3\n", true), b';');
        assert_eq!(sniff_delimiter(b"a\tb\n1\t\"x,y,z\"\n", true), b'\t');
        assert_eq!(sniff_delimiter(b"a|b\n1|2\n", true), b'|');
        assert_eq!(sniff_delimiter(b"single\n1\n", true), b',');
    }
}
