//! A text index over a numbered list of texts (a table segment's rows, though this crate
//! does not know it): one tantivy index, built in memory and kept as one checksummed
//! file with each text's length in tokens, so that the statistics of any subset of the
//! texts (the live rows) are exact.
//!
//! File layout (little-endian):
//! ```text
//! "TARNTXT1" | version u32 | tokenizer u8 | texts u32 | documents u32 | tokens u64
//! | length u32 × texts (u32::MAX: NULL)
//! | files u32 | (name_len u16, name, len u64, bytes) × files    (tantivy's files)
//! | crc32 of everything before u32
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};

use tantivy::directory::Directory;
use tantivy::directory::RamDirectory;
use tantivy::index::SegmentId;
use tantivy::query::{BooleanQuery, EnableScoring, PhraseQuery, Query, TermQuery};
use tantivy::schema::{FAST, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::store::Compressor;
use tantivy::{
    DocSet, Index, IndexReader, IndexSettings, IndexWriter, ReloadPolicy, SegmentReader,
    TERMINATED, TantivyDocument,
};

use crate::analyzer::Tokenizer;
use crate::query::Occur;
use crate::score::{Provider, Stats, TEXT_FIELD, Weights, term};
use crate::{Error, Result};

const MAGIC: &[u8; 8] = b"TARNTXT1";
const VERSION: u32 = 1;
/// Length of a NULL text.
const NULL: u32 = u32::MAX;
/// Name of the analyzer registered on every index this crate makes.
const ANALYZER: &str = "tarn";
/// Each document's number in the list (a fast field): documents keep it through merges.
const POS_FIELD: &str = "pos";
/// Writer memory: a segment's texts usually fit in one tantivy segment; larger ones
/// are merged into one after the commit.
const WRITER_MEMORY: usize = 256 << 20;

fn schema(tokenizer: Tokenizer) -> Schema {
    let record = if tokenizer.has_positions() {
        IndexRecordOption::WithFreqsAndPositions
    } else {
        IndexRecordOption::WithFreqs
    };
    let mut b = Schema::builder();
    let text = b.add_text_field(
        "text",
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(ANALYZER)
                .set_index_option(record)
                .set_fieldnorms(true),
        ),
    );
    debug_assert_eq!(text, TEXT_FIELD);
    b.add_u64_field(POS_FIELD, FAST);
    b.build()
}

fn settings() -> IndexSettings {
    IndexSettings {
        docstore_compression: Compressor::None,
        docstore_compress_dedicated_thread: false,
        ..IndexSettings::default()
    }
}

/// Builds the index file of `texts` (in order; `None` is NULL) analyzed by `tokenizer`
/// into `out`. `progress(done, total)` reports texts indexed; `cancelled()` stops the
/// build with [`Error::Cancelled`].
pub fn build<'a>(
    texts: impl ExactSizeIterator<Item = Option<&'a str>>,
    tokenizer: Tokenizer,
    progress: &dyn Fn(usize, usize),
    cancelled: &dyn Fn() -> bool,
    out: &mut dyn std::io::Write,
) -> Result<()> {
    let total = texts.len();
    let dir = RamDirectory::create();
    let index = Index::create(dir.clone(), schema(tokenizer), settings())?;
    index.tokenizers().register(ANALYZER, tokenizer.analyzer());
    let pos_field = index.schema().get_field(POS_FIELD)?;
    let mut writer: IndexWriter = index.writer_with_num_threads(1, WRITER_MEMORY)?;
    let mut lengths: Vec<u32> = Vec::with_capacity(total);
    let mut analyzer = tokenizer.analyzer();
    let (mut docs, mut tokens) = (0u32, 0u64);
    for (i, text) in texts.enumerate() {
        if i % 1024 == 0 {
            if cancelled() {
                return Err(Error::Cancelled);
            }
            progress(i, total);
        }
        let mut doc = TantivyDocument::new();
        doc.add_u64(pos_field, i as u64);
        match text {
            Some(t) => {
                let mut n = 0u32;
                crate::analyzer::for_each_token(&mut analyzer, t, |_, _| n += 1);
                lengths.push(n.min(NULL - 1));
                docs += 1;
                tokens += u64::from(n);
                doc.add_text(TEXT_FIELD, t);
            }
            None => lengths.push(NULL),
        }
        writer.add_document(doc)?;
    }
    writer.commit()?;
    let ids: Vec<SegmentId> = index.searchable_segment_ids()?;
    if ids.len() > 1 {
        writer.merge(&ids).wait()?;
    }
    writer.garbage_collect_files().wait()?;
    writer.wait_merging_threads()?;
    progress(total, total);

    let mut names: Vec<PathBuf> = index.directory().list_managed_files().into_iter().collect();
    names.push(PathBuf::from("meta.json"));
    names.sort();
    names.dedup();
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    for name in names {
        if dir.exists(&name).unwrap_or(false) {
            let bytes = dir
                .atomic_read(&name)
                .map_err(tantivy::TantivyError::from)?;
            files.push((name, bytes));
        }
    }

    let mut buf: Vec<u8> = Vec::new();
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&VERSION.to_le_bytes());
    buf.push(tokenizer.code());
    buf.extend_from_slice(&(total as u32).to_le_bytes());
    buf.extend_from_slice(&docs.to_le_bytes());
    buf.extend_from_slice(&tokens.to_le_bytes());
    for l in &lengths {
        buf.extend_from_slice(&l.to_le_bytes());
    }
    buf.extend_from_slice(&(files.len() as u32).to_le_bytes());
    for (name, bytes) in &files {
        let name = name.to_string_lossy();
        buf.extend_from_slice(&(name.len() as u16).to_le_bytes());
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        buf.extend_from_slice(bytes);
    }
    tarn_format::push_crc_trailer(&mut buf);
    out.write_all(&buf)
        .map_err(|e| Error::Io(format!("writing a text index: {e}")))?;
    Ok(())
}

/// An open text index.
pub struct TextIndex {
    tokenizer: Tokenizer,
    /// Each text's length in tokens (`NULL` for NULL).
    lengths: Vec<u32>,
    docs: u64,
    tokens: u64,
    /// tantivy document → text number, when they differ.
    doc_to_pos: Option<Vec<u32>>,
    /// Its inverse: text number → tantivy document.
    pos_to_doc: Option<Vec<u32>>,
    /// Keeps the index open.
    _reader: IndexReader,
    searcher: tantivy::Searcher,
}

impl std::fmt::Debug for TextIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextIndex")
            .field("tokenizer", &self.tokenizer)
            .field("texts", &self.lengths.len())
            .field("docs", &self.docs)
            .finish()
    }
}

fn corrupt(msg: impl std::fmt::Display) -> Error {
    Error::Corrupt(format!("text index file: {msg}"))
}

impl TextIndex {
    /// Opens an index file (its bytes; they are checked and copied).
    pub fn open(bytes: &[u8]) -> Result<TextIndex> {
        if bytes.len() < MAGIC.len() + tarn_format::CRC_LEN {
            return Err(corrupt("too short"));
        }
        let body =
            tarn_format::split_crc_trailer(bytes).ok_or_else(|| corrupt("checksum mismatch"))?;
        let mut c = tarn_format::Cursor::new(body);
        let short = || Error::Corrupt("text index file is truncated".into());
        if !c.magic(MAGIC) {
            return Err(corrupt("not a text index"));
        }
        let version = c.u32().ok_or_else(short)?;
        if version != VERSION {
            return Err(corrupt(format!("unknown version {version}")));
        }
        let tokenizer = Tokenizer::from_code(c.u8().ok_or_else(short)?)
            .ok_or_else(|| corrupt("unknown tokenizer"))?;
        let texts = c.u32().ok_or_else(short)? as usize;
        let docs = u64::from(c.u32().ok_or_else(short)?);
        let tokens = c.u64().ok_or_else(short)?;
        let raw = c
            .take(texts.checked_mul(4).ok_or_else(|| corrupt("size"))?)
            .ok_or_else(short)?;
        let lengths: Vec<u32> = raw
            .chunks_exact(4)
            .filter_map(|b| tarn_format::u32_at(b, 0))
            .collect();
        let (mut d, mut t) = (0u64, 0u64);
        for &l in &lengths {
            if l != NULL {
                d += 1;
                t += u64::from(l);
            }
        }
        if (d, t) != (docs, tokens) {
            return Err(corrupt("lengths do not add up"));
        }
        let dir = RamDirectory::create();
        let files = c.u32().ok_or_else(short)?;
        let mut names: Vec<&str> = Vec::new();
        for _ in 0..files {
            let n = c.u16().ok_or_else(short)? as usize;
            let name = std::str::from_utf8(c.take(n).ok_or_else(short)?).map_err(corrupt)?;
            let len = usize::try_from(c.u64().ok_or_else(short)?).map_err(corrupt)?;
            let data = c.take(len).ok_or_else(short)?;
            if name.is_empty() || name.contains('/') || name.contains("..") {
                return Err(corrupt("bad file name"));
            }
            dir.atomic_write(Path::new(name), data).map_err(corrupt)?;
            names.push(name);
        }
        if !c.rest().is_empty() {
            return Err(corrupt("trailing bytes"));
        }
        let index = Index::open(dir).map_err(corrupt)?;
        // The outer checksum covers the file as written; tantivy's own footers are
        // checked too, because tantivy trusts its files' contents and panics on some
        // damage (a term-info slice past its file's end) instead of failing. The two
        // files without a footer are JSON, which fails to parse instead.
        for name in &names {
            if *name == "meta.json" || *name == ".managed.json" {
                continue;
            }
            if !index
                .directory()
                .validate_checksum(Path::new(name))
                .map_err(corrupt)?
            {
                return Err(corrupt(format!("checksum mismatch in {name}")));
            }
        }
        index.tokenizers().register(ANALYZER, tokenizer.analyzer());
        if index.schema() != schema(tokenizer) {
            return Err(corrupt("unexpected schema"));
        }
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(corrupt)?;
        let searcher = reader.searcher();
        let segs = searcher.segment_readers();
        let max_doc: u32 = segs.iter().map(|s| s.max_doc()).sum();
        if segs.len() > 1 || max_doc as usize != texts {
            return Err(corrupt(format!(
                "{} segments of {max_doc} documents for {texts} texts",
                segs.len()
            )));
        }
        let (mut doc_to_pos, mut pos_to_doc) = (None, None);
        if let Some(seg) = segs.first() {
            let column = seg.fast_fields().u64(POS_FIELD).map_err(corrupt)?;
            let mut map = Vec::with_capacity(texts);
            let mut seen = vec![false; texts];
            for doc in 0..seg.max_doc() {
                let pos = column
                    .first(doc)
                    .filter(|&p| (p as usize) < texts)
                    .ok_or_else(|| corrupt("document without a position"))?;
                if std::mem::replace(&mut seen[pos as usize], true) {
                    return Err(corrupt("two documents at one position"));
                }
                map.push(pos as u32);
            }
            if map.iter().enumerate().any(|(d, &p)| d as u32 != p) {
                let mut inverse = vec![0u32; texts];
                for (d, &p) in map.iter().enumerate() {
                    inverse[p as usize] = d as u32;
                }
                pos_to_doc = Some(inverse);
                doc_to_pos = Some(map);
            }
        }
        Ok(TextIndex {
            tokenizer,
            lengths,
            docs,
            tokens,
            doc_to_pos,
            pos_to_doc,
            _reader: reader,
            searcher,
        })
    }

    /// The tokenizer the texts were analyzed with.
    pub fn tokenizer(&self) -> Tokenizer {
        self.tokenizer
    }

    /// Number of texts (NULL included).
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Whether there are no texts.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    fn segment(&self) -> Option<&SegmentReader> {
        self.searcher.segment_readers().first()
    }

    fn pos(&self, doc: u32) -> u32 {
        match &self.doc_to_pos {
            Some(m) => m[doc as usize],
            None => doc,
        }
    }

    /// The statistics of `query`'s terms over the texts other than `deleted` (text
    /// numbers, ascending, each at most once; `is_deleted` answers the same set).
    pub fn stats(
        &self,
        query: &crate::TextQuery,
        deleted: &mut dyn Iterator<Item = u32>,
        is_deleted: &dyn Fn(u32) -> bool,
    ) -> Result<Stats> {
        let mut s = Stats::new(query);
        s.docs = self.docs;
        s.tokens = self.tokens;
        let mut any_deleted = false;
        for p in deleted {
            any_deleted = true;
            match self.lengths.get(p as usize) {
                Some(&l) if l != NULL => {
                    s.docs -= 1;
                    s.tokens -= u64::from(l);
                }
                _ => {}
            }
        }
        let Some(seg) = self.segment() else {
            return Ok(s);
        };
        let inverted = seg.inverted_index(TEXT_FIELD)?;
        for (i, t) in query.terms.iter().enumerate() {
            let t = term(t);
            s.doc_freq[i] = if any_deleted {
                let mut n = 0u64;
                if let Some(mut postings) = inverted.read_postings(&t, IndexRecordOption::Basic)? {
                    let mut doc = postings.doc();
                    while doc != TERMINATED {
                        if !is_deleted(self.pos(doc)) {
                            n += 1;
                        }
                        doc = postings.advance();
                    }
                }
                n
            } else {
                u64::from(inverted.doc_freq(&t)?)
            };
        }
        Ok(s)
    }

    /// Calls `emit(text number, score)` for every text that matches the query of
    /// `weights` and that `allow` lets through, in no particular order. Scores are
    /// those [`Weights::score`] gives the same text analyzed on the spot.
    pub fn search(
        &self,
        weights: &Weights,
        allow: &dyn Fn(u32) -> bool,
        emit: &mut dyn FnMut(u32, f32),
    ) -> Result<()> {
        let query = weights.query();
        if query.matches_nothing() || weights.stats().docs == 0 {
            return Ok(());
        }
        let Some(seg) = self.segment() else {
            return Ok(());
        };
        let n = seg.max_doc() as usize;
        let inverted = seg.inverted_index(TEXT_FIELD)?;
        let norms = seg.get_fieldnorms_reader(TEXT_FIELD)?;
        let provider = Provider::new(query, weights.stats());
        let scoring = EnableScoring::enabled_from_statistics_provider(&provider, &self.searcher);
        let mut tally = Tally::new(n);
        let mut touched: Vec<u32> = Vec::new();
        for (i, c) in query.clauses.iter().enumerate() {
            let mut visit = |doc: u32, s: Option<f32>| {
                if tally.visit(doc as usize, c.occur, s) {
                    touched.push(doc);
                }
            };
            if c.is_phrase() {
                let weight = phrase(query, c).weight(scoring)?;
                let mut scorer = weight.scorer(seg, 1.0)?;
                let mut doc = scorer.doc();
                while doc != TERMINATED {
                    let s = (c.occur != Occur::MustNot).then(|| scorer.score());
                    visit(doc, s);
                    doc = scorer.advance();
                }
            } else {
                let t = term(&query.terms[c.terms[0].1]);
                let Some(mut postings) =
                    inverted.read_postings(&t, IndexRecordOption::WithFreqs)?
                else {
                    continue;
                };
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    use tantivy::postings::Postings;
                    let s = (c.occur != Occur::MustNot).then(|| {
                        weights.clause_score(i, norms.fieldnorm_id(doc), postings.term_freq())
                    });
                    visit(doc, s);
                    doc = postings.advance();
                }
            }
        }
        let required = weights.required() as u32;
        for doc in touched {
            let Some(score) = tally.score(doc as usize, required) else {
                continue;
            };
            let pos = self.pos(doc);
            if allow(pos) {
                emit(pos, score);
            }
        }
        Ok(())
    }

    /// The matches that can rank among the `k` best texts `allow` lets through, with
    /// the exact scores [`TextIndex::search`] gives them, in no particular order. When
    /// the caller already holds `k` texts scoring at least `floor` (from other indexes),
    /// texts below it are left out too.
    ///
    /// tantivy's block-max WAND (or its pruning scorer, for queries that are not a plain
    /// union or intersection of words) skips blocks of postings that cannot beat the
    /// running k-th score. Its scores sum the clauses in its own order, so they may
    /// differ from the exact ones in the last bits: the pruning runs slightly below the
    /// k-th score (by a small slack), and every survivor is scored again exactly.
    pub fn top(
        &self,
        weights: &Weights,
        k: usize,
        floor: Option<f32>,
        allow: &dyn Fn(u32) -> bool,
    ) -> Result<Vec<(u32, f32)>> {
        let query = weights.query();
        if k == 0 || query.matches_nothing() || weights.stats().docs == 0 {
            return Ok(Vec::new());
        }
        let Some(seg) = self.segment() else {
            return Ok(Vec::new());
        };
        if !Self::prunes(query) {
            // Many words: one dense pass over every posting beats WAND's pivoting.
            let mut all: Vec<(u32, f32)> = Vec::new();
            self.search(weights, allow, &mut |p, s| {
                if floor.is_none_or(|f| s >= f) {
                    all.push((p, s));
                }
            })?;
            if all.len() > k {
                all.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                all.truncate(k);
            }
            return Ok(all);
        }
        let provider = Provider::new(query, weights.stats());
        let scoring = EnableScoring::enabled_from_statistics_provider(&provider, &self.searcher);
        let clauses: Vec<(tantivy::query::Occur, Box<dyn Query>)> = query
            .clauses
            .iter()
            .map(|c| {
                let occur = match c.occur {
                    Occur::Must => tantivy::query::Occur::Must,
                    Occur::Should => tantivy::query::Occur::Should,
                    Occur::MustNot => tantivy::query::Occur::MustNot,
                };
                let q: Box<dyn Query> = if c.is_phrase() {
                    Box::new(phrase(query, c))
                } else {
                    Box::new(TermQuery::new(
                        term(&query.terms[c.terms[0].1]),
                        IndexRecordOption::WithFreqs,
                    ))
                };
                (occur, q)
            })
            .collect();
        let weight = BooleanQuery::new(clauses).weight(scoring)?;
        // tantivy's bounds assume what does not hold here, so the pruning threshold is
        // lowered by how far they can fall short (see `bound_shortfall`).
        let shortfall = self.bound_shortfall(weights, seg)?;
        let slack = slack(query);
        let lowered = |s: f32| s * (1.0 - slack) / shortfall;
        // Matches score above 0, so 0 admits every match.
        let start = floor.map_or(0.0, lowered).max(0.0);
        // The k best approximate scores so far (a min-heap), and every text let in.
        let mut best: BinaryHeap<Reverse<Approx>> = BinaryHeap::with_capacity(k.min(4096) + 1);
        let mut candidates: Vec<(u32, f32)> = Vec::new();
        let cut = |best: &BinaryHeap<Reverse<Approx>>| match best.peek() {
            Some(Reverse(Approx(s))) if best.len() == k => lowered(*s).max(start),
            _ => start,
        };
        weight.for_each_pruning(start, seg, &mut |doc, score| {
            if allow(self.pos(doc)) {
                candidates.push((doc, score));
                best.push(Reverse(Approx(score)));
                if best.len() > k {
                    best.pop();
                }
            }
            cut(&best)
        })?;
        let cut = cut(&best);
        candidates.retain(|c| c.1 > cut);
        candidates.sort_unstable_by_key(|c| c.0);
        let docs: Vec<u32> = candidates.iter().map(|c| c.0).collect();
        let exact = self.score_docs(weights, seg, &scoring, &docs)?;
        Ok(docs
            .into_iter()
            .zip(exact)
            .filter_map(|(doc, s)| Some((self.pos(doc), s?)))
            .collect())
    }

    /// Whether [`TextIndex::top`] prunes the postings of `query` (else it takes one
    /// dense pass over them, which scores every match anyway).
    pub fn prunes(query: &crate::TextQuery) -> bool {
        query.clauses.len() <= MAX_PRUNED_CLAUSES
    }

    /// How many times tantivy's score bounds may fall short of a real score under the
    /// query's statistics (at least 1; infinite: do not prune).
    ///
    /// - A block's stored maximum is the (length, frequency) pair that scored best
    ///   under the index's own average length (its tokens over all its documents,
    ///   NULL texts included); under the live rows' average another pair of the block
    ///   may score higher. With BM25's length term `b·len/avg`, changing the average
    ///   from `a0` to `a1` changes any score by a factor within `[a0/a1, a1/a0]`, so the
    ///   stored maximum falls short by at most `max(a1/a0, a0/a1)`.
    /// - A term's global maximum (and a partial last block's) is its score at the
    ///   longest length with a huge frequency, which a short text repeating the term
    ///   can beat: the true supremum is the weight itself (frequency → ∞, length 0).
    fn bound_shortfall(&self, weights: &Weights, seg: &SegmentReader) -> Result<f32> {
        let inverted = seg.inverted_index(TEXT_FIELD)?;
        let a0 = inverted.total_num_tokens() as f64 / f64::from(seg.max_doc().max(1));
        let stats = weights.stats();
        let a1 = stats.tokens as f64 / stats.docs.max(1) as f64;
        if a0 <= 0.0 || a1 <= 0.0 {
            return Ok(f32::INFINITY);
        }
        let averages = (a1 / a0).max(a0 / a1);
        let global = weights.max_score_shortfall();
        // A little margin for the rounding of each factor.
        Ok((averages * f64::from(global) * 1.0001) as f32)
    }

    /// The exact scores of the texts at `positions` (distinct text numbers), in that
    /// order, as [`TextIndex::search`] gives them: `None` for a text that matches
    /// nothing.
    pub fn score_positions(
        &self,
        weights: &Weights,
        positions: &[u32],
    ) -> Result<Vec<Option<f32>>> {
        let query = weights.query();
        let (Some(seg), false) = (
            self.segment(),
            query.matches_nothing() || weights.stats().docs == 0,
        ) else {
            return Ok(vec![None; positions.len()]);
        };
        let mut docs: Vec<(u32, usize)> = positions
            .iter()
            .enumerate()
            .filter(|(_, p)| (**p as usize) < self.lengths.len())
            .map(|(j, &p)| {
                let doc = self.pos_to_doc.as_ref().map_or(p, |m| m[p as usize]);
                (doc, j)
            })
            .collect();
        docs.sort_unstable();
        let provider = Provider::new(query, weights.stats());
        let scoring = EnableScoring::enabled_from_statistics_provider(&provider, &self.searcher);
        let sorted: Vec<u32> = docs.iter().map(|d| d.0).collect();
        let scores = self.score_docs(weights, seg, &scoring, &sorted)?;
        let mut out = vec![None; positions.len()];
        for ((_, j), score) in docs.iter().zip(scores) {
            out[*j] = score;
        }
        Ok(out)
    }

    /// The exact scores of `docs` (ascending tantivy documents): the clauses summed in
    /// query order, as [`TextIndex::search`] sums them; `None` for a document that does
    /// not match.
    fn score_docs(
        &self,
        weights: &Weights,
        seg: &SegmentReader,
        scoring: &EnableScoring<'_>,
        docs: &[u32],
    ) -> Result<Vec<Option<f32>>> {
        use tantivy::postings::Postings;
        let query = weights.query();
        let inverted = seg.inverted_index(TEXT_FIELD)?;
        let norms = seg.get_fieldnorms_reader(TEXT_FIELD)?;
        let mut tally = Tally::new(docs.len());
        for (i, c) in query.clauses.iter().enumerate() {
            let mut visit = |j: usize, s: Option<f32>| {
                tally.visit(j, c.occur, s);
            };
            if c.is_phrase() {
                let weight = phrase(query, c).weight(*scoring)?;
                let mut scorer = weight.scorer(seg, 1.0)?;
                for (j, &d) in docs.iter().enumerate() {
                    if scorer.doc() == TERMINATED {
                        break;
                    }
                    if scorer.doc() > d || scorer.seek(d) != d {
                        continue;
                    }
                    let s = (c.occur != Occur::MustNot).then(|| scorer.score());
                    visit(j, s);
                }
            } else {
                let t = term(&query.terms[c.terms[0].1]);
                let Some(mut postings) =
                    inverted.read_postings(&t, IndexRecordOption::WithFreqs)?
                else {
                    continue;
                };
                for (j, &d) in docs.iter().enumerate() {
                    if postings.doc() == TERMINATED {
                        break;
                    }
                    if postings.doc() > d || postings.seek(d) != d {
                        continue;
                    }
                    let s = (c.occur != Occur::MustNot).then(|| {
                        weights.clause_score(i, norms.fieldnorm_id(d), postings.term_freq())
                    });
                    visit(j, s);
                }
            }
        }
        let required = weights.required() as u32;
        Ok((0..docs.len()).map(|j| tally.score(j, required)).collect())
    }
}

/// What the clauses found in each document of a pass (by the pass's own numbering):
/// their scores summed in query order, the required clauses it has, and whether an
/// excluded clause occurs in it. `TextIndex::search` and `TextIndex::score_docs`
/// decide a match and its score through it alike.
struct Tally {
    score: Vec<f32>,
    /// Required clauses found; `u32::MAX` once an excluded one is.
    hits: Vec<u32>,
    /// Whether a clause other than an excluded one occurs.
    seen: Vec<bool>,
}

impl Tally {
    fn new(n: usize) -> Self {
        Tally {
            score: vec![0.0; n],
            hits: vec![0; n],
            seen: vec![false; n],
        }
    }

    /// A clause of kind `occur` occurs in document `j`, scoring `s`. True the first
    /// time a clause that is not excluded occurs there.
    fn visit(&mut self, j: usize, occur: Occur, s: Option<f32>) -> bool {
        if occur == Occur::MustNot {
            self.hits[j] = u32::MAX;
            return false;
        }
        let first = !std::mem::replace(&mut self.seen[j], true);
        if let Some(s) = s {
            self.score[j] += s;
        }
        if occur == Occur::Must && self.hits[j] != u32::MAX {
            self.hits[j] += 1;
        }
        first
    }

    /// Document `j`'s score if it matches: some clause, every one of the `required`,
    /// no excluded one.
    fn score(&self, j: usize, required: u32) -> Option<f32> {
        let h = self.hits[j];
        (self.seen[j] && h != u32::MAX && h >= required).then_some(self.score[j])
    }
}

/// The phrase of clause `c` of `query`: its terms at their offsets.
fn phrase(query: &crate::TextQuery, c: &crate::Clause) -> PhraseQuery {
    PhraseQuery::new_with_offset(
        c.terms
            .iter()
            .map(|(o, t)| (*o, term(&query.terms[*t])))
            .collect(),
    )
}

/// Queries of more clauses than this are not pruned: with many terms WAND's pivoting
/// costs more than it skips. Over 100k documents of ~180 words (`tarn-text-bench
/// --short-words N`, the first N words of each CISI query): 10 words take 2.0 ms
/// pruned, 2.8 ms in one dense pass; 14 words 3.3 vs 3.4, about the crossing; CISI's
/// whole queries (~20–60 words) 30 ms with tantivy's WAND, 8 ms dense. The switch sits
/// a little past the crossing, where either way costs about the same. (A hybrid arm
/// asks for max(4k, 100) rows, which prunes less; not measured apart.)
const MAX_PRUNED_CLAUSES: usize = 16;

/// How far below the k-th score pruning runs: two sums of the same `n` positive terms
/// in different orders differ by at most about `2 n ε` relative (ε = 2⁻²⁴).
fn slack(query: &crate::TextQuery) -> f32 {
    1e-5 + 2.5e-7 * query.clauses.len() as f32
}

/// A score ordered for the heap of [`TextIndex::top`].
#[derive(Debug, Clone, Copy, PartialEq)]
struct Approx(f32);

impl Eq for Approx {}

impl PartialOrd for Approx {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Approx {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}
