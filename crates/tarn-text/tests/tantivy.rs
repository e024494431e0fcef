//! Scores against tantivy's own: a plain tantivy index of the live texts, queried
//! through tantivy's query parser, must score every text as Tarn does — through its
//! per-part indexes with shared statistics, and analyzing texts on the spot — however
//! the texts are split, and after deletes.

use std::collections::HashMap;

use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, QueryParser, TermQuery};
use tantivy::schema::{FAST, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::{Index, TantivyDocument, Term};
use tarn_text::{Matcher, MemoryIndex, Stats, TextIndex, TextQuery, Tokenizer, Weights};

fn cisi() -> Vec<String> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/cisi/corpus.jsonl"
    ))
    .expect("corpus");
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            v["text"].as_str().expect("text").to_string()
        })
        .collect()
}

/// tantivy's scores of `query` over `texts` (by number; `None` texts are left out).
fn tantivy_scores(texts: &[Option<&str>], tok: Tokenizer, query: &str) -> HashMap<u64, f32> {
    let mut b = Schema::builder();
    let record = if tok.has_positions() {
        IndexRecordOption::WithFreqsAndPositions
    } else {
        IndexRecordOption::WithFreqs
    };
    let field = b.add_text_field(
        "text",
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer("t")
                .set_index_option(record),
        ),
    );
    let id = b.add_u64_field("id", FAST);
    let index = Index::create_in_ram(b.build());
    index.tokenizers().register("t", tok.analyzer());
    let mut w: tantivy::IndexWriter = index.writer_with_num_threads(1, 50_000_000).expect("w");
    for (i, t) in texts.iter().enumerate() {
        if let Some(t) = t {
            let mut d = TantivyDocument::new();
            d.add_text(field, t);
            d.add_u64(id, i as u64);
            w.add_document(d).expect("add");
        }
    }
    w.commit().expect("commit");
    let searcher = index.reader().expect("reader").searcher();
    let q: Box<dyn Query> = if tok.has_positions() {
        let parser = QueryParser::for_index(&index, vec![field]);
        parser.parse_query(query).expect("tantivy parses it")
    } else {
        // tantivy's parser makes phrases of a word's trigrams, which have no
        // positions: the reference is the trigrams as optional terms.
        let mut a = tok.analyzer();
        let mut s = a.token_stream(query);
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        while s.advance() {
            let t = Term::from_field_text(field, &s.token().text);
            if !clauses
                .iter()
                .any(|(_, q)| format!("{q:?}").contains(&format!("{t:?}")))
            {
                clauses.push((
                    Occur::Should,
                    Box::new(TermQuery::new(t, IndexRecordOption::WithFreqs)),
                ));
            }
        }
        Box::new(BooleanQuery::new(clauses))
    };
    let top = searcher
        .search(&q, &TopDocs::with_limit(100_000).order_by_score())
        .expect("search");
    let mut out = HashMap::new();
    for (score, addr) in top {
        let seg = searcher.segment_reader(addr.segment_ord);
        let col = seg.fast_fields().u64("id").expect("id");
        out.insert(col.first(addr.doc_id).expect("id"), score);
    }
    out
}

/// Tarn's scores of `query` over `texts` with `deleted` removed: the texts are split
/// at `cuts` into parts; even parts are indexed, odd parts analyzed on the spot.
fn tarn_scores(
    texts: &[Option<&str>],
    deleted: &[bool],
    tok: Tokenizer,
    query: &str,
    cuts: &[usize],
) -> HashMap<u64, f32> {
    let q = TextQuery::parse(query, tok);
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(texts.len());
    let mut stats = Stats::new(&q);
    enum Part {
        Indexed(TextIndex, usize),
        Loose(Vec<(usize, tarn_text::DocMatch)>),
        Memory(MemoryIndex, usize),
    }
    let mut parts = Vec::new();
    // Parts take turns: an index file, texts analyzed on the spot, texts analyzed
    // into memory.
    for (n, w) in bounds.windows(2).enumerate() {
        let (lo, hi) = (w[0], w[1]);
        if n % 3 == 2 {
            let mem = MemoryIndex::build(texts[lo..hi].iter().copied(), tok);
            stats.add(&mem.stats(&q, &|p| !deleted[lo + p as usize]));
            parts.push(Part::Memory(mem, lo));
        } else if n % 3 == 0 {
            let mut file = Vec::new();
            tarn_text::build(
                texts[lo..hi].iter().copied(),
                tok,
                &|_, _| {},
                &|| false,
                &mut file,
            )
            .expect("build");
            let idx = TextIndex::open(&file).expect("open");
            let dels: Vec<u32> = (lo..hi)
                .filter(|&i| deleted[i])
                .map(|i| (i - lo) as u32)
                .collect();
            let s = idx
                .stats(&q, &mut dels.iter().copied(), &|p| deleted[lo + p as usize])
                .expect("stats");
            stats.add(&s);
            parts.push(Part::Indexed(idx, lo));
        } else {
            let mut m = Matcher::new(&q, tok);
            let mut rows = Vec::new();
            for i in lo..hi {
                if !deleted[i] {
                    rows.push((i, m.analyze(texts[i], &mut stats)));
                }
            }
            parts.push(Part::Loose(rows));
        }
    }
    let weights = Weights::new(&q, stats).expect("weights");
    let mut out = HashMap::new();
    for p in &parts {
        match p {
            Part::Indexed(idx, lo) => idx
                .search(&weights, &|p| !deleted[lo + p as usize], &mut |p, s| {
                    assert!(out.insert((lo + p as usize) as u64, s).is_none());
                })
                .expect("search"),
            Part::Memory(mem, lo) => {
                let mut last = None;
                mem.search(&weights, &|p| !deleted[lo + p as usize], &mut |p, s| {
                    assert!(last < Some(p), "texts in ascending order");
                    last = Some(p);
                    assert!(out.insert((lo + p as usize) as u64, s).is_none());
                });
            }
            Part::Loose(rows) => {
                for (i, m) in rows {
                    let s = weights.score(m);
                    if s > 0.0 {
                        out.insert(*i as u64, s);
                    }
                }
            }
        }
    }
    out
}

fn assert_same(want: &HashMap<u64, f32>, got: &HashMap<u64, f32>, what: &str) {
    let mut missing: Vec<_> = want.keys().filter(|k| !got.contains_key(k)).collect();
    missing.sort();
    let mut extra: Vec<_> = got.keys().filter(|k| !want.contains_key(k)).collect();
    extra.sort();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: missing {missing:?}, extra {extra:?}"
    );
    for (k, w) in want {
        let g = got[k];
        // The same terms summed in another order differ in the last bits at most.
        assert!(
            (w - g).abs() <= 1e-5 * w.abs().max(1.0),
            "{what}: text {k}: tantivy {w}, tarn {g}"
        );
    }
}

const QUERIES: &[&str] = &[
    "information retrieval",
    "library",
    "\"information retrieval\" systems",
    "+computer indexing",
    "indexing -computer",
    "+\"information science\" +research -library",
    "the of and",
    "automatic classification of documents",
    "nonexistentword",
    "retrieval retrieval",
    "+retrieval retrieval \"retrieval\"",
    "Information-Retrieval \"of the\" Systems",
];

#[test]
fn scores_equal_tantivys_across_parts_and_deletes() {
    let corpus = cisi();
    let texts: Vec<Option<&str>> = corpus.iter().map(|s| Some(s.as_str())).collect();
    let none = vec![false; texts.len()];
    // Every 7th text deleted, and a few NULLs.
    let deleted: Vec<bool> = (0..texts.len()).map(|i| i % 7 == 3).collect();
    let mut with_nulls = texts.clone();
    for i in (0..with_nulls.len()).step_by(97) {
        with_nulls[i] = None;
    }
    for tok in [Tokenizer::EnStem, Tokenizer::Default, Tokenizer::Whitespace] {
        for q in QUERIES {
            let want = tantivy_scores(&texts, tok, q);
            if *q != "nonexistentword" {
                assert!(!want.is_empty(), "{q} matches nothing");
            }
            for cuts in [&[][..], &[500], &[300, 700, 1000]] {
                let got = tarn_scores(&texts, &none, tok, q, cuts);
                assert_same(&want, &got, &format!("{tok:?} {q} {cuts:?}"));
            }
            let live: Vec<Option<&str>> = with_nulls
                .iter()
                .zip(&deleted)
                .map(|(t, d)| if *d { None } else { *t })
                .collect();
            let want = tantivy_scores(&live, tok, q);
            for cuts in [&[][..], &[700], &[100, 900, 1200]] {
                let got = tarn_scores(&with_nulls, &deleted, tok, q, cuts);
                assert_same(&want, &got, &format!("{tok:?} {q} {cuts:?} deleted"));
            }
        }
    }
}

#[test]
fn a_text_scores_the_same_bits_indexed_or_loose() {
    let corpus = cisi();
    let texts: Vec<Option<&str>> = corpus.iter().map(|s| Some(s.as_str())).collect();
    let none = vec![false; texts.len()];
    for q in QUERIES {
        let a = tarn_scores(&texts, &none, Tokenizer::EnStem, q, &[]);
        let b = tarn_scores(&texts, &none, Tokenizer::EnStem, q, &[0]);
        let c = tarn_scores(&texts, &none, Tokenizer::EnStem, q, &[400, 800, 1100]);
        assert_eq!(a, b, "{q}");
        assert_eq!(a, c, "{q}");
    }
}

/// The `k` best of `(text, score)` pairs: score descending, then text ascending.
fn best_k(mut hits: Vec<(u32, f32)>, k: usize) -> Vec<(u32, u32)> {
    hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    hits.truncate(k);
    hits.into_iter().map(|(p, s)| (p, s.to_bits())).collect()
}

#[test]
fn pruned_top_k_equals_the_exhaustive_ranking() {
    let corpus = cisi();
    let texts: Vec<Option<&str>> = corpus
        .iter()
        .enumerate()
        .map(|(i, s)| (i % 89 != 5).then_some(s.as_str()))
        .collect();
    let mut file = Vec::new();
    tarn_text::build(
        texts.iter().copied(),
        Tokenizer::EnStem,
        &|_, _| {},
        &|| false,
        &mut file,
    )
    .expect("build");
    let idx = TextIndex::open(&file).expect("open");
    let deleted = |p: u32| p % 11 == 4;
    let dels: Vec<u32> = (0..texts.len() as u32).filter(|&p| deleted(p)).collect();
    let mut queries: Vec<String> = QUERIES.iter().map(|q| q.to_string()).collect();
    // Long queries (a whole document as the query: one dense pass), and queries of
    // about a dozen words, the longest that are pruned.
    queries.extend(
        corpus
            .iter()
            .step_by(250)
            .map(|t| t.chars().take(600).collect()),
    );
    queries.extend(
        corpus
            .iter()
            .skip(7)
            .step_by(300)
            .map(|t| t.split_whitespace().take(13).collect::<Vec<_>>().join(" ")),
    );
    // Texts the pruned search scored, and the matches there were.
    let (mut kept, mut matched) = (0, 0);
    for q in &queries {
        let tq = TextQuery::parse(q, Tokenizer::EnStem);
        let stats = idx
            .stats(&tq, &mut dels.iter().copied(), &deleted)
            .expect("stats");
        let weights = Weights::new(&tq, stats).expect("weights");
        for filter in [None, Some(3u32)] {
            let allow = |p: u32| !deleted(p) && filter.is_none_or(|f| !p.is_multiple_of(f));
            let mut all = Vec::new();
            idx.search(&weights, &allow, &mut |p, s| all.push((p, s)))
                .expect("search");
            for k in [1, 3, 10, 100] {
                let want = best_k(all.clone(), k);
                let got = idx.top(&weights, k, None, &allow).expect("top");
                if k == 1 {
                    kept += got.len();
                    matched += all.len();
                }
                assert!(got.iter().all(|h| allow(h.0)), "{q}: only allowed texts");
                assert_eq!(best_k(got, k), want, "{q} k={k} filter={filter:?}");
                // Given a floor (the k-th score held elsewhere), every text that can
                // still rank comes back.
                if let Some(&(_, bits)) = want.last() {
                    let floor = f32::from_bits(bits);
                    let got = idx.top(&weights, k, Some(floor), &allow).expect("top");
                    let mut merged: Vec<(u32, f32)> = got;
                    merged.extend(want.iter().map(|&(p, b)| (p, f32::from_bits(b))));
                    merged.sort_by_key(|h| h.0);
                    merged.dedup_by_key(|h| h.0);
                    assert_eq!(best_k(merged, k), want, "{q} k={k} floor");
                }
            }
        }
    }
    assert!(
        kept * 4 < matched,
        "the top-1 searches skip most matches: {kept} of {matched} kept"
    );
}

/// Checks `top` against the exhaustive search of `idx` for `query` under `stats`.
fn check_top(idx: &TextIndex, tok: Tokenizer, query: &str, stats: Option<Stats>, what: &str) {
    let q = TextQuery::parse(query, tok);
    let stats = match stats {
        Some(s) => s,
        None => idx
            .stats(&q, &mut std::iter::empty(), &|_| false)
            .expect("stats"),
    };
    let weights = Weights::new(&q, stats).expect("weights");
    let mut all = Vec::new();
    idx.search(&weights, &|_| true, &mut |p, s| all.push((p, s)))
        .expect("search");
    for k in [1, 2, 10] {
        let got = idx.top(&weights, k, None, &|_| true).expect("top");
        assert_eq!(
            best_k(got, k),
            best_k(all.clone(), k),
            "{what}: {query} k={k}"
        );
    }
}

fn index_of(texts: &[Option<String>], tok: Tokenizer) -> TextIndex {
    let mut file = Vec::new();
    tarn_text::build(
        texts.iter().map(|t| t.as_deref()),
        tok,
        &|_, _| {},
        &|| false,
        &mut file,
    )
    .expect("build");
    TextIndex::open(&file).expect("open")
}

#[test]
fn pruning_holds_when_the_statistics_are_not_the_indexs_own() {
    let words = |w: &str, n: usize| vec![w; n].join(" ");
    let filler = |n: usize| {
        (0..n)
            .map(|i| format!("f{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    // Block maxima chosen under the index's average length (NULL texts count as
    // documents there, not in the live statistics): a block whose best text under
    // the live average is not its stored maximum.
    let mut texts: Vec<Option<String>> = vec![Some("whale".into())];
    let short = format!("whale {}", filler(9));
    texts.extend((1..128).map(|_| Some(short.clone())));
    texts.push(Some(format!("{} {}", words("whale", 3), filler(97))));
    texts.extend((129..384).map(|_| Some(short.clone())));
    texts.extend((384..984).map(|_| Some(filler(250))));
    texts.extend((984..1968).map(|_| None));
    let idx = index_of(&texts, Tokenizer::Whitespace);
    check_top(
        &idx,
        Tokenizer::Whitespace,
        "whale zz",
        None,
        "stale block maxima",
    );
    check_top(
        &idx,
        Tokenizer::Whitespace,
        "+whale +f3",
        None,
        "stale block maxima",
    );
    // A short text repeating a term beats tantivy's global maximum of the term (its
    // score at the longest length).
    let mut texts: Vec<Option<String>> = vec![Some(words("t", 43))];
    texts.extend((1..128).map(|_| Some("t".into())));
    texts.push(Some(words("t", 41)));
    texts.extend((129..5000).map(|_| Some("x".into())));
    let idx = index_of(&texts, Tokenizer::Whitespace);
    check_top(&idx, Tokenizer::Whitespace, "t zz", None, "global maximum");
    // CISI scored with statistics that include other documents (another segment or
    // the memtable) much shorter or much longer than its own.
    let corpus = cisi();
    let texts: Vec<Option<String>> = corpus.iter().map(|t| Some(t.clone())).collect();
    let idx = index_of(&texts, Tokenizer::EnStem);
    for q in QUERIES {
        let tq = TextQuery::parse(q, Tokenizer::EnStem);
        let own = idx
            .stats(&tq, &mut std::iter::empty(), &|_| false)
            .expect("stats");
        for per_doc in [1u64, 30, 2000] {
            let mut stats = own.clone();
            stats.docs += 5000;
            stats.tokens += 5000 * per_doc;
            check_top(
                &idx,
                Tokenizer::EnStem,
                q,
                Some(stats),
                &format!("{per_doc} tokens"),
            );
        }
    }
}

#[test]
fn raw_and_ngram_tokenizers() {
    let texts = [
        Some("New York"),
        Some("new york"),
        Some("York"),
        None,
        Some("Yorkshire pudding"),
    ];
    let none = vec![false; texts.len()];
    let got = tarn_scores(&texts, &none, Tokenizer::Raw, "\"New York\"", &[2]);
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![0]);
    let want = tantivy_scores(&texts, Tokenizer::Ngram, "york");
    let got = tarn_scores(&texts, &none, Tokenizer::Ngram, "york", &[1]);
    assert_same(&want, &got, "ngram");
    assert!(got.contains_key(&4), "trigrams match inside words");
    // A word is the set of its trigrams: one repeated counts once.
    let texts = [Some("aaaa"), Some("aaa"), Some("abcabc"), Some("abc")];
    let none = vec![false; texts.len()];
    for q in ["aaa", "aaaa", "aaaaaaa", "abcabc"] {
        let want = tantivy_scores(&texts, Tokenizer::Ngram, q);
        let got = tarn_scores(&texts, &none, Tokenizer::Ngram, q, &[]);
        assert_same(&want, &got, q);
    }
    assert_eq!(
        tarn_scores(&texts, &none, Tokenizer::Ngram, "aaa", &[]),
        tarn_scores(&texts, &none, Tokenizer::Ngram, "aaaaaaa", &[])
    );
}

#[test]
fn damaged_files_are_errors() {
    let texts = [Some("a b c"), None, Some("b c d")];
    let mut file = Vec::new();
    tarn_text::build(
        texts.iter().copied(),
        Tokenizer::Default,
        &|_, _| {},
        &|| false,
        &mut file,
    )
    .expect("build");
    assert!(TextIndex::open(&file).is_ok());
    for i in (0..file.len()).step_by(file.len() / 200 + 1) {
        let mut bad = file.clone();
        bad[i] ^= 0x41;
        assert!(TextIndex::open(&bad).is_err(), "flip at {i}");
    }
    for n in [0, 4, 12, file.len() / 2, file.len() - 1] {
        assert!(TextIndex::open(&file[..n]).is_err(), "cut at {n}");
    }
}
