//! The compaction policy: which runs of a table's segments to rewrite, as a pure
//! function of what each segment holds (tantivy keeps its merge policy apart from the
//! merger the same way). The mechanism that rewrites a run is `maintenance.rs`.
//!
//! A run is a stretch of neighbouring sealed segments with one schema, up to
//! [`TARGET_ROWS`] live rows. Without `force` it takes only small segments (under
//! [`SMALL_ROWS`] live rows) past its first, and it is rewritten when it merges four or
//! more segments or one of them has more than [`DELETED_SHARE`] of its rows deleted.
//! With `force` (`VACUUM`) every run of two or more segments, or with any delete, is
//! rewritten.

use std::ops::Range;

/// Compaction merges runs of segments up to this many live rows.
pub(crate) const TARGET_ROWS: usize = 1 << 20;
/// A segment with fewer live rows than this is "small" and worth merging.
pub(crate) const SMALL_ROWS: usize = TARGET_ROWS / 4;
/// A segment whose deleted share exceeds this is rewritten.
pub(crate) const DELETED_SHARE: f64 = 0.3;
/// Runs of at least this many small segments are merged.
const MERGED_SEGMENTS: usize = 4;

/// What the policy sees of one segment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentStats {
    /// A memtable segment: never part of a run.
    pub in_memory: bool,
    /// Segments of one schema share this number (neighbours with another schema never
    /// merge).
    pub schema: usize,
    /// Rows in the segment.
    pub rows: usize,
    /// Rows of it deleted.
    pub deleted: usize,
}

impl SegmentStats {
    fn live(&self) -> usize {
        self.rows.saturating_sub(self.deleted)
    }
}

/// The runs of `segments` (indexes into it, in order, not overlapping) to rewrite.
pub(crate) fn runs_to_rewrite(segments: &[SegmentStats], force: bool) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < segments.len() {
        if segments[i].in_memory {
            i += 1;
            continue;
        }
        let mut j = i;
        let mut live = 0;
        while j < segments.len()
            && !segments[j].in_memory
            && segments[j].schema == segments[i].schema
            && (j == i || live + segments[j].live() <= TARGET_ROWS)
            && (force || j == i || segments[j].live() < SMALL_ROWS)
        {
            live += segments[j].live();
            j += 1;
        }
        let run = &segments[i..j];
        let worth = if force {
            run.len() > 1 || run.iter().any(|s| s.deleted > 0)
        } else {
            run.len() >= MERGED_SEGMENTS
                || run
                    .iter()
                    .any(|s| s.deleted as f64 > DELETED_SHARE * s.rows as f64)
        };
        if worth {
            out.push(i..j);
        }
        i = j.max(i + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(rows: usize, deleted: usize) -> SegmentStats {
        SegmentStats {
            in_memory: false,
            schema: 0,
            rows,
            deleted,
        }
    }

    #[test]
    fn small_segments_merge_in_fours_and_large_ones_stay() {
        let small = seg(1000, 0);
        assert!(runs_to_rewrite(&[small; 3], false).is_empty());
        assert_eq!(runs_to_rewrite(&[small; 4], false), vec![0..4]);
        // A large segment starts a run but small ones do not join it past the target.
        let large = seg(TARGET_ROWS, 0);
        assert!(runs_to_rewrite(&[large, large], false).is_empty());
        assert_eq!(
            runs_to_rewrite(&[large, small, small, small, small], false),
            vec![1..5]
        );
        // Another schema, or the memtable, ends a run.
        let mut other = small;
        other.schema = 1;
        assert!(runs_to_rewrite(&[small, small, other, small], false).is_empty());
        let mut memory = small;
        memory.in_memory = true;
        assert!(runs_to_rewrite(&[small, small, memory, small, small], false).is_empty());
    }

    #[test]
    fn deletes_past_their_share_rewrite_and_force_takes_every_run() {
        assert_eq!(runs_to_rewrite(&[seg(1000, 301)], false), vec![0..1]);
        assert!(runs_to_rewrite(&[seg(1000, 300)], false).is_empty());
        assert_eq!(runs_to_rewrite(&[seg(1000, 1)], true), vec![0..1]);
        assert!(runs_to_rewrite(&[seg(1000, 0)], true).is_empty());
        let large = seg(TARGET_ROWS / 2, 0);
        assert_eq!(runs_to_rewrite(&[large, large, large], true), vec![0..2]);
    }
}
