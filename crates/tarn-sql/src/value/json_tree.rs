//! What a jsonb value costs as a `serde_json::Value` tree, read from its text before it
//! is built. The tree takes many times the text (a map node of about 600 bytes per
//! object, 32 bytes per value): a 63 MB text of small objects parsed into 5 GB in one
//! call, which no memory check between batches could stop. A leaf.

/// The most bytes one value's tree may take: PostgreSQL's limit on the size of a jsonb
/// value (268,435,455 bytes).
pub(crate) const TREE_LIMIT: u64 = 268_435_455;

/// About what the tree of the JSON text `text` takes, from one scan of its bytes.
pub(crate) fn tree_bytes(text: &str) -> u64 {
    let (mut values, mut objects) = (1u64, 0u64);
    let (mut in_string, mut escaped) = (false, false);
    for &b in text.as_bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b',' | b'[' => values += 1,
            b'{' => {
                values += 1;
                objects += 1;
            }
            _ => {}
        }
    }
    text.len() as u64 + 32 * values + 640 * objects
}

/// The refusal of a value whose tree would take `bytes`, past [`TREE_LIMIT`], for `what`
/// (`None` when within it).
pub(crate) fn too_large(text: &str, what: &str) -> Option<String> {
    let bytes = tree_bytes(text);
    (bytes > TREE_LIMIT).then(|| {
        format!(
            "jsonb value too large {what}: it would take about {bytes} bytes in memory, past \
             the limit of {TREE_LIMIT} bytes per value"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_weigh_more_than_their_text() {
        assert_eq!(tree_bytes("1"), 1 + 32);
        // Brackets and commas inside strings are text, not values.
        assert_eq!(tree_bytes(r#""[,{""#), 5 + 32);
        assert_eq!(tree_bytes(r#""a\"[""#), 6 + 32);
        let small = "[{\"a\":[]},".repeat(1000) + "1]";
        assert!(tree_bytes(&small) > 600 * 1000);
        assert!(too_large(&small, "to work on").is_none());
    }
}
