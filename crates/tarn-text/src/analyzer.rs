//! The tokenizers a `bm25` index may name (SPEC §5), as tantivy text analyzers.

use tantivy::tokenizer::{
    Language, LowerCaser, MAX_TOKEN_LEN, NgramTokenizer, RawTokenizer, RemoveLongFilter,
    SimpleTokenizer, Stemmer, TextAnalyzer, WhitespaceTokenizer,
};

/// A `bm25` index's `tokenizer` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Tokenizer {
    /// Words (runs of letters and digits), lower-cased, at most 40 bytes, English
    /// stems (tantivy's `en_stem`). The default.
    #[default]
    EnStem,
    /// Words, lower-cased, at most 40 bytes (tantivy's `default`).
    Default,
    /// Runs of non-whitespace, as written (tantivy's `whitespace`).
    Whitespace,
    /// The whole value as one token (tantivy's `raw`): exact-value matching.
    Raw,
    /// Lower-cased character trigrams (as PostgreSQL's `pg_trgm`): matches inside
    /// words and across spelling slips. Trigrams have no positions, so a phrase or a
    /// word is the set of its trigrams.
    Ngram,
}

/// Length of the `ngram` tokenizer's grams.
const NGRAM: usize = 3;

impl Tokenizer {
    /// Every tokenizer, by its option name.
    pub const ALL: [(&'static str, Tokenizer); 5] = [
        ("en_stem", Tokenizer::EnStem),
        ("default", Tokenizer::Default),
        ("whitespace", Tokenizer::Whitespace),
        ("raw", Tokenizer::Raw),
        ("ngram", Tokenizer::Ngram),
    ];

    /// The tokenizer named `name` (the option's value), if there is one.
    pub fn from_name(name: &str) -> Option<Tokenizer> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }

    /// The option value naming it.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("en_stem", |(n, _)| n)
    }

    /// Its code in index files.
    pub(crate) fn code(self) -> u8 {
        match self {
            Tokenizer::EnStem => 0,
            Tokenizer::Default => 1,
            Tokenizer::Whitespace => 2,
            Tokenizer::Raw => 3,
            Tokenizer::Ngram => 4,
        }
    }

    /// The tokenizer of code `c`.
    pub(crate) fn from_code(c: u8) -> Option<Tokenizer> {
        Some(match c {
            0 => Tokenizer::EnStem,
            1 => Tokenizer::Default,
            2 => Tokenizer::Whitespace,
            3 => Tokenizer::Raw,
            4 => Tokenizer::Ngram,
            _ => return None,
        })
    }

    /// Whether the index records positions (phrases need them; trigrams have none).
    pub fn has_positions(self) -> bool {
        self != Tokenizer::Ngram
    }

    /// A fresh analyzer (analyzers keep per-stream state, so each thread needs its own).
    pub fn analyzer(self) -> TextAnalyzer {
        match self {
            Tokenizer::EnStem => TextAnalyzer::builder(SimpleTokenizer::default())
                .filter(RemoveLongFilter::limit(40))
                .filter(LowerCaser)
                .filter(Stemmer::new(Language::English))
                .build(),
            Tokenizer::Default => TextAnalyzer::builder(SimpleTokenizer::default())
                .filter(RemoveLongFilter::limit(40))
                .filter(LowerCaser)
                .build(),
            Tokenizer::Whitespace => TextAnalyzer::from(WhitespaceTokenizer::default()),
            Tokenizer::Raw => TextAnalyzer::from(RawTokenizer::default()),
            Tokenizer::Ngram => match NgramTokenizer::new(NGRAM, NGRAM, false) {
                Ok(t) => TextAnalyzer::builder(t).filter(LowerCaser).build(),
                // 3..=3 is a valid range; never taken.
                Err(_) => TextAnalyzer::from(RawTokenizer::default()),
            },
        }
    }
}

/// Calls `each(text, position)` for every token `analyzer` makes of `text` that an index
/// keeps (tantivy drops tokens longer than [`MAX_TOKEN_LEN`] bytes when it indexes).
pub(crate) fn for_each_token(
    analyzer: &mut TextAnalyzer,
    text: &str,
    mut each: impl FnMut(&str, usize),
) {
    let mut stream = analyzer.token_stream(text);
    while stream.advance() {
        let t = stream.token();
        if t.text.len() <= MAX_TOKEN_LEN {
            each(&t.text, t.position);
        }
    }
}
