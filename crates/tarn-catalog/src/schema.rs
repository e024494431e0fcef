//! Tables, their columns and their indexes: the records SQL creates and reads, and the
//! catalog's lookups of them.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Catalog, ColumnId, IndexId, SqlType, TableId, Timestamp};

/// How a column gets a value when an INSERT does not give one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ColumnDefault {
    /// `SERIAL`/`BIGSERIAL`: the table's durable sequence for this column.
    Sequence {
        /// PostgreSQL name of the sequence, `<table>_<col>_seq`.
        name: String,
    },
    /// `DEFAULT <expr>`: the SQL text as written, evaluated at each insert.
    Expr {
        /// SQL text.
        sql: String,
    },
}

/// A column of a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnDef {
    /// Immutable id; stored data addresses columns by it.
    pub id: ColumnId,
    /// Current name.
    pub name: String,
    /// Declared type.
    pub ty: SqlType,
    /// False for `NOT NULL` and primary key columns.
    pub nullable: bool,
    /// Default, if any.
    pub default: Option<ColumnDefault>,
    /// Part of the primary key.
    pub primary_key: bool,
    /// Has its own UNIQUE constraint.
    pub unique: bool,
    /// Value (JSON-encoded as query results encode it) of rows written before the column
    /// was added by `ALTER TABLE … ADD COLUMN … DEFAULT`; `None` means NULL.
    pub missing: Option<serde_json::Value>,
    /// Dimension fixed durably by the first stored vector when the type does not fix it.
    pub vector_dim: Option<u32>,
}

impl ColumnDef {
    /// A nullable column without default or constraint (what an uploaded file's columns
    /// and an added column start as).
    pub fn plain(id: ColumnId, name: impl Into<String>, ty: SqlType) -> ColumnDef {
        ColumnDef {
            id,
            name: name.into(),
            ty,
            nullable: true,
            default: None,
            primary_key: false,
            unique: false,
            missing: None,
            vector_dim: None,
        }
    }

    /// The dimension vectors of this column must have, if it is known yet.
    pub fn dimension(&self) -> Option<u32> {
        match self.ty {
            SqlType::Vector { dim: Some(d) } => Some(d),
            _ => self.vector_dim,
        }
    }
}

/// A table definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableDef {
    /// Immutable internal id.
    pub id: TableId,
    /// Owning organization.
    pub org_id: String,
    /// Workspace (SQL schema).
    pub workspace_id: String,
    /// Current name.
    pub name: String,
    /// Created `USING engine` (search and `engine_index` allowed).
    pub engine: bool,
    /// Columns in order.
    pub columns: Vec<ColumnDef>,
    /// Next column id to hand out; ids of dropped columns are never reused.
    pub next_column_id: ColumnId,
    /// Named unique constraints: (constraint name, column ids). The primary key is
    /// `<table>_pkey`, a column's UNIQUE `<table>_<col>_key`.
    pub unique_constraints: Vec<(String, Vec<ColumnId>)>,
    /// When it was made (stored as ISO 8601 text).
    #[serde(with = "crate::time::iso_text")]
    pub created_at: Timestamp,
}

impl TableDef {
    /// The column named `name`, if any.
    pub fn column(&self, name: &str) -> Option<&ColumnDef> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The column with id `id`, if any.
    pub fn column_by_id(&self, id: ColumnId) -> Option<&ColumnDef> {
        self.columns.iter().find(|c| c.id == id)
    }
}

/// What an `engine_index` index does. Serialized as its SQL name (`index_type = '…'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum IndexType {
    /// Approximate nearest neighbours over a `FLOAT4[]` column.
    Hnsw,
    /// MaxSim over a `FLOAT4[][]` column.
    Maxsim,
    /// BM25 full-text search over a text column.
    Bm25,
    /// Equality lookups on a text column, through the table's key index.
    ExactText,
}

impl IndexType {
    /// Parses an `index_type` value. The hosted service's `clustered` and
    /// `clustered_quantized` are aliases of `hnsw`.
    pub fn parse(s: &str) -> Option<IndexType> {
        match s {
            "hnsw" | "clustered" | "clustered_quantized" => Some(IndexType::Hnsw),
            "maxsim" => Some(IndexType::Maxsim),
            "bm25" => Some(IndexType::Bm25),
            "exact_text" => Some(IndexType::ExactText),
            _ => None,
        }
    }

    /// The SQL name.
    pub fn as_str(self) -> &'static str {
        match self {
            IndexType::Hnsw => "hnsw",
            IndexType::Maxsim => "maxsim",
            IndexType::Bm25 => "bm25",
            IndexType::ExactText => "exact_text",
        }
    }
}

/// An `engine_index` index on one column. Its name lives in the namespace of its
/// table's workspace, shared with table names (as relations share a schema in
/// PostgreSQL).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexDef {
    /// Immutable internal id.
    pub id: IndexId,
    /// Name, unique among the relations of the table's workspace.
    pub name: String,
    /// Indexed table.
    pub table_id: TableId,
    /// Indexed column.
    pub column: ColumnId,
    /// Kind of index.
    pub index_type: IndexType,
    /// `WITH (…)` options other than `index_type`, keys lower case, values as written.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// When it was made (stored as ISO 8601 text).
    #[serde(with = "crate::time::iso_text")]
    pub created_at: Timestamp,
}

impl Catalog {
    /// A table by (organization, workspace, name).
    pub fn table(&self, org_id: &str, ws_id: &str, name: &str) -> Option<&TableDef> {
        self.table_names
            .get(&(org_id.to_string(), ws_id.to_string(), name.to_string()))
            .and_then(|id| self.tables.get(id))
            .map(Arc::as_ref)
    }

    /// A table by id.
    pub fn table_by_id(&self, id: TableId) -> Option<&TableDef> {
        self.tables.get(&id).map(Arc::as_ref)
    }

    /// Tables of a workspace, by name.
    pub fn tables_of(&self, org_id: &str, ws_id: &str) -> Vec<&TableDef> {
        let mut tables: Vec<_> = self
            .tables
            .values()
            .filter(|t| t.org_id == org_id && t.workspace_id == ws_id)
            .map(Arc::as_ref)
            .collect();
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        tables
    }

    /// Every table, by id.
    pub fn all_tables(&self) -> impl Iterator<Item = &TableDef> {
        self.tables.values().map(Arc::as_ref)
    }

    /// The id the next created table gets.
    pub fn next_table_id(&self) -> TableId {
        self.next_table_id
    }

    /// An index by (organization, workspace, name).
    pub fn index(&self, org_id: &str, ws_id: &str, name: &str) -> Option<&IndexDef> {
        self.index_names
            .get(&(org_id.to_string(), ws_id.to_string(), name.to_string()))
            .and_then(|id| self.indexes.get(id))
    }

    /// An index by id.
    pub fn index_by_id(&self, id: IndexId) -> Option<&IndexDef> {
        self.indexes.get(&id)
    }

    /// Indexes of a table, by id (creation order).
    pub fn indexes_of(&self, table_id: TableId) -> Vec<&IndexDef> {
        self.indexes
            .values()
            .filter(|i| i.table_id == table_id)
            .collect()
    }

    /// The id the next created index gets.
    pub fn next_index_id(&self) -> IndexId {
        self.next_index_id
    }

    /// Whether a table, a view or an index of the workspace is named `name`.
    pub fn relation_exists(&self, org_id: &str, ws_id: &str, name: &str) -> bool {
        self.name_taken(&(org_id.to_string(), ws_id.to_string(), name.to_string()))
    }

    /// Whether a relation (table, index or view) has the (organization, workspace,
    /// name) `key`: the one namespace they share.
    pub(crate) fn name_taken(&self, key: &(String, String, String)) -> bool {
        self.table_names.contains_key(key)
            || self.index_names.contains_key(key)
            || self.view_names.contains_key(key)
    }

    /// The column sets storage keeps key indexes for, as (column ids, unique): the
    /// primary key and UNIQUE constraints (unique), then the columns of `exact_text`
    /// indexes (not unique) that no constraint already covers. Empty for an unknown table.
    pub fn key_column_sets(&self, table_id: TableId) -> Vec<(Vec<ColumnId>, bool)> {
        let Some(table) = self.tables.get(&table_id) else {
            return Vec::new();
        };
        let mut sets: Vec<(Vec<ColumnId>, bool)> = Vec::new();
        for (_, cols) in &table.unique_constraints {
            if !sets.iter().any(|(c, _)| c == cols) {
                sets.push((cols.clone(), true));
            }
        }
        for index in self.indexes_of(table_id) {
            if index.index_type == IndexType::ExactText
                && !sets.iter().any(|(c, _)| *c == [index.column])
            {
                sets.push((vec![index.column], false));
            }
        }
        sets
    }
}
