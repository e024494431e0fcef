//! CREATE TABLE (and … AS SELECT), DROP TABLE and ALTER TABLE. Indexes are in
//! `index_ddl.rs`; the catalog drops a table's or a column's indexes with it.

use std::collections::HashMap;

use datafusion::arrow::array::RecordBatch;
use datafusion::sql::sqlparser::ast::{
    self, AlterTableOperation, ColumnOption, CreateTableOptions, HiveIOFormat, ObjectName,
    TableConstraint,
};
use tarn_catalog::{CatalogOp, ColumnDef, ColumnDefault, TableDef};

use crate::ast::ident::{name_parts, normalize, quoted};
use crate::ast::types::{declared_type, sql_type_of};
use crate::error::{Error, Result, bad};
use crate::statement::result::StatementResult;
use crate::statement::txn::Txn;

/// The longest `DEFAULT` a column may have, as SQL text (SPEC §8): room for a literal
/// vector of a few thousand dimensions, not for filling the shared catalog.
pub(crate) const MAX_DEFAULT_BYTES: usize = 64 << 10;

/// Refuses a name a new table cannot have (CREATE TABLE, ALTER TABLE … RENAME TO,
/// uploads): 1-63 bytes, as PostgreSQL's identifiers, without control or
/// bidirectional control characters.
pub fn check_table_name(name: &str) -> Result<()> {
    check_name("table", name)
}

/// Refuses a name a new column cannot have (CREATE TABLE, ADD COLUMN, RENAME COLUMN,
/// CREATE TABLE … AS, uploads): not empty (PostgreSQL's "zero-length delimited
/// identifier"), at most 63 bytes, and printable.
pub fn check_column_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return bad("zero-length delimited identifier: a column name cannot be empty");
    }
    check_name("column", name)
}

/// Refuses a `kind` name (table, column, index) that is empty or longer than 63 bytes
/// (PostgreSQL's identifiers, which it cuts there), or that holds control characters;
/// one wording for every kind, the name shown cut.
pub(crate) fn check_name(kind: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 63 {
        return bad(format!(
            "invalid {kind} name {}: use 1-63 bytes (a character may take several)",
            tarn_catalog::shown(name)
        ));
    }
    check_name_chars(kind, name)
}

/// Refuses control characters (NUL, line breaks, …) and bidirectional controls in a
/// name: they break every listing that prints it (`\d`, CSV headers, logs) and can
/// make one name look like another, as file names already refuse them.
pub(crate) fn check_name_chars(kind: &str, name: &str) -> Result<()> {
    if name.chars().any(tarn_catalog::is_hidden_control) {
        return bad(format!(
            "invalid {kind} name {}: control and bidirectional control characters are not allowed",
            tarn_catalog::shown(name)
        ));
    }
    Ok(())
}

/// A default's value in its column's type, as an INSERT would store it, or the 400
/// that names the default (`NOT NULL DEFAULT NULL` passes: PostgreSQL refuses it only
/// when a row takes it).
fn default_in_type(
    value: &datafusion::arrow::array::ArrayRef,
    col: &ColumnDef,
) -> Result<datafusion::arrow::array::ArrayRef> {
    let mut nullable = col.clone();
    nullable.nullable = true;
    crate::value::coerce::coerce_column(value, &nullable)
        .map(|c| c.array)
        .map_err(|e| Error::BadRequest(format!("default of column \"{}\": {e}", col.name)))
}

impl Txn<'_> {
    /// `(workspace, table)` of a name being created: it must be qualified with a
    /// workspace of this organization.
    fn new_table_name(&self, name: &ObjectName) -> Result<(String, String)> {
        self.new_relation_name(name, "table")
    }

    /// `(workspace, name)` of a relation (`kind`: table, view) being created.
    pub(crate) fn new_relation_name(
        &self,
        name: &ObjectName,
        kind: &str,
    ) -> Result<(String, String)> {
        let parts = name_parts(name)?;
        match parts.as_slice() {
            [ws, t] => {
                if self.catalog.workspace(&self.org, ws).is_none() {
                    return Err(Error::NotFound(format!("schema \"{ws}\" does not exist")));
                }
                check_table_name(t)?;
                Ok((ws.clone(), t.clone()))
            }
            _ => bad(format!(
                "{kind} name {} must be schema-qualified: \"<workspace>\".\"<{kind}>\"",
                quoted(&parts)
            )),
        }
    }

    pub(crate) async fn create_table(&mut self, ct: ast::CreateTable) -> Result<StatementResult> {
        self.lock_ddl().await;
        let (ws, name) = self.new_table_name(&ct.name)?;
        if self.catalog.relation_exists(&self.org, &ws, &name) {
            if ct.if_not_exists {
                return Ok(StatementResult::none(0));
            }
            return Err(Error::Conflict(format!(
                "relation \"{ws}\".\"{name}\" already exists"
            )));
        }
        if ct.or_replace || ct.temporary || ct.external || ct.like.is_some() || ct.clone.is_some() {
            return bad(
                "only CREATE TABLE [IF NOT EXISTS] … [USING engine] and CREATE TABLE … AS SELECT are supported",
            );
        }
        // Clauses the parser reads that Tarn has no meaning for: refused, not ignored
        // (`PARTITION BY RANGE (x)` made an unpartitioned table without a word).
        let unsupported = [
            (ct.partition_by.is_some(), "PARTITION BY"),
            (
                ct.partition_of.is_some() || ct.for_values.is_some(),
                "PARTITION OF",
            ),
            (ct.inherits.is_some(), "INHERITS"),
            (ct.on_commit.is_some(), "ON COMMIT"),
            (
                ct.cluster_by.is_some() || ct.clustered_by.is_some(),
                "CLUSTER BY",
            ),
            (
                ct.order_by.is_some() || ct.primary_key.is_some(),
                "ORDER BY",
            ),
            (ct.comment.is_some(), "COMMENT"),
            (ct.without_rowid || ct.strict, "WITHOUT ROWID/STRICT"),
            (
                !matches!(ct.hive_distribution, ast::HiveDistributionStyle::NONE),
                "PARTITIONED BY",
            ),
            (
                ct.hive_formats.as_ref().is_some_and(|h| {
                    h.row_format.is_some() || h.serde_properties.is_some() || h.location.is_some()
                }) || ct.location.is_some()
                    || ct.file_format.is_some(),
                "ROW FORMAT/LOCATION/STORED AS",
            ),
            (ct.on_cluster.is_some(), "ON CLUSTER"),
            (
                ct.diststyle.is_some()
                    || ct.distkey.is_some()
                    || ct.sortkey.is_some()
                    || ct.backup.is_some(),
                "DISTSTYLE/DISTKEY/SORTKEY/BACKUP",
            ),
        ];
        if let Some((_, clause)) = unsupported.iter().find(|(set, _)| *set) {
            return bad(format!("CREATE TABLE … {clause} is not supported"));
        }
        let engine = match ct.hive_formats.as_ref().and_then(|h| h.storage.as_ref()) {
            None => false,
            Some(HiveIOFormat::Using { format }) if normalize(format) == "engine" => true,
            Some(HiveIOFormat::Using { format }) => {
                return bad(format!("access method \"{}\" does not exist", format.value));
            }
            Some(_) => return bad("unsupported table storage clause"),
        };
        match &ct.table_options {
            CreateTableOptions::None => {}
            CreateTableOptions::With(opts)
            | CreateTableOptions::Options(opts)
            | CreateTableOptions::Plain(opts)
            | CreateTableOptions::TableProperties(opts) => {
                if let Some(first) = opts.first() {
                    let key = match first {
                        ast::SqlOption::KeyValue { key, .. } => key.value.clone(),
                        other => other.to_string(),
                    };
                    return bad(format!("unrecognized parameter \"{key}\""));
                }
            }
        }
        // From the database, not this transaction's catalog: an upload under way holds
        // an id its table does not have yet.
        let id = self.shared.db.reserve_table_id();
        let mut def = TableDef {
            id,
            org_id: self.org.clone(),
            workspace_id: ws.clone(),
            name: name.clone(),
            engine,
            columns: vec![],
            next_column_id: 1,
            unique_constraints: vec![],
            created_at: tarn_catalog::Timestamp::now(),
        };
        let mut rows: Option<Vec<RecordBatch>> = None;
        if let Some(query) = ct.query {
            if !ct.columns.is_empty() {
                return bad("CREATE TABLE … AS SELECT takes no column list");
            }
            let (names, schema, batches) = self.run_query(*query, HashMap::new()).await?;
            for (field, col_name) in schema.fields().iter().zip(&names) {
                if def.column(col_name).is_some() {
                    return bad(format!("column \"{col_name}\" specified more than once"));
                }
                check_column_name(col_name)?;
                let ty = sql_type_of(field)?;
                def.columns
                    .push(ColumnDef::plain(def.next_column_id, col_name.clone(), ty));
                def.next_column_id += 1;
            }
            rows = Some(batches);
        } else {
            for c in &ct.columns {
                let col = self.column_def(&mut def, c)?;
                push_column(&mut def, col)?;
            }
            for constraint in &ct.constraints {
                let (cols, primary) = match constraint {
                    TableConstraint::PrimaryKey(pk) => (&pk.columns, true),
                    TableConstraint::Unique(u) => (&u.columns, false),
                    other => {
                        return bad(format!("constraint not supported: {other}"));
                    }
                };
                let names = cols
                    .iter()
                    .map(|c| match &c.column.expr {
                        ast::Expr::Identifier(id) => Ok(normalize(id)),
                        other => bad(format!(
                            "constraint columns must be column names, not {other}"
                        )),
                    })
                    .collect::<Result<Vec<_>>>()?;
                add_constraint(&mut def, &names, primary)?;
            }
        }
        if def.columns.is_empty() {
            return bad("a table needs at least one column");
        }
        if def.columns.len() > 1600 {
            return bad("tables can have at most 1600 columns");
        }
        // Defaults must evaluate to the column's type: check now rather than at the first insert.
        for col in def.columns.clone() {
            if let Some(ColumnDefault::Expr { .. }) = &col.default {
                let value = self.default_array(&def, &col, 1).await?;
                let mut any = col.clone();
                any.nullable = true;
                crate::value::coerce::coerce_column(&value, &any)?;
            }
        }
        self.catalog_op(CatalogOp::CreateTable(def.clone()))?;
        self.add_new_table(id).await;
        let mut affected = 0;
        if let Some(batches) = rows {
            let targets: Vec<usize> = (0..def.columns.len()).collect();
            for b in batches {
                affected += b.num_rows() as u64;
                // Re-read: an earlier batch may have fixed a vector dimension.
                let def = self
                    .catalog
                    .table_by_id(id)
                    .cloned()
                    .unwrap_or_else(|| def.clone());
                self.write_rows(&def, &targets, b.columns().to_vec(), b.num_rows())
                    .await?;
            }
        }
        Ok(StatementResult::none(affected))
    }

    /// Builds a column from its definition (type, constraints, default) and registers
    /// its own PRIMARY KEY / UNIQUE constraint on `def`.
    fn column_def(&self, def: &mut TableDef, c: &ast::ColumnDef) -> Result<ColumnDef> {
        let name = normalize(&c.name);
        if def.column(&name).is_some() {
            return bad(format!("column \"{name}\" specified more than once"));
        }
        let declared = declared_type(&c.data_type)?;
        let mut col = ColumnDef {
            id: def.next_column_id,
            name: name.clone(),
            ty: declared.ty,
            nullable: !declared.serial,
            default: declared.serial.then(|| ColumnDefault::Sequence {
                name: format!("{}_{}_seq", def.name, name),
            }),
            primary_key: false,
            unique: false,
            missing: None,
            vector_dim: None,
        };
        def.next_column_id += 1;
        let mut primary = false;
        let mut unique = false;
        for opt in &c.options {
            match &opt.option {
                ColumnOption::NotNull => col.nullable = false,
                ColumnOption::Null => {
                    if declared.serial {
                        return bad(format!(
                            "conflicting NULL/NOT NULL declarations for column \"{name}\""
                        ));
                    }
                    col.nullable = true
                }
                ColumnOption::Default(expr) => {
                    if declared.serial {
                        return bad(format!(
                            "multiple default values specified for column \"{name}\""
                        ));
                    }
                    // PostgreSQL's rule: a default is evaluated per row without a
                    // query (Tarn ran the subquery at each insert).
                    if crate::ast::ident::has_subquery(expr) {
                        return bad(format!(
                            "cannot use subquery in DEFAULT expression (column \"{name}\")"
                        ));
                    }
                    // A literal default is checked against the column's type now, as
                    // PostgreSQL does (`int DEFAULT 'x'` is refused at CREATE and ALTER,
                    // not at the first insert, or after rows were given it).
                    if let Some(crate::statement::dml::Cell::Scalar(v)) =
                        crate::statement::dml::literal_cell(expr, &col)
                    {
                        default_in_type(&v.to_array_of_size(1)?, &col)?;
                    }
                    let sql = expr.to_string();
                    // Kept in the catalog every organization shares, as each name is.
                    if sql.len() > MAX_DEFAULT_BYTES {
                        return bad(format!(
                            "the DEFAULT of column \"{name}\" is {} bytes of SQL, at most \
                             {MAX_DEFAULT_BYTES}",
                            sql.len()
                        ));
                    }
                    col.default = Some(ColumnDefault::Expr { sql })
                }
                ColumnOption::PrimaryKey(_) => primary = true,
                ColumnOption::Unique(_) => unique = true,
                other => return bad(format!("column option not supported: {other}")),
            }
        }
        col.primary_key = primary;
        col.unique = unique;
        if primary {
            col.nullable = false;
        }
        Ok(col)
    }

    pub(crate) async fn drop_tables(
        &mut self,
        names: &[ObjectName],
        if_exists: bool,
        cascade: bool,
    ) -> Result<StatementResult> {
        self.lock_ddl().await;
        // Every name is resolved before any table is dropped, as PostgreSQL does: a
        // table named twice (`DROP TABLE x, x`) is dropped once, not "missing" the
        // second time.
        let mut ids = Vec::with_capacity(names.len());
        for name in names {
            let def = match self.resolve(name) {
                Ok(d) => d,
                Err(Error::NotFound(m)) => {
                    if let [ws, t] = name_parts(name)?.as_slice()
                        && self.catalog.index(&self.org, ws, t).is_some()
                    {
                        return bad(format!("\"{t}\" is not a table; use DROP INDEX"));
                    }
                    if if_exists {
                        continue;
                    }
                    return Err(Error::NotFound(m));
                }
                Err(e) => return Err(e),
            };
            if !ids.contains(&def.id) {
                ids.push(def.id);
            }
        }
        self.drop_views_reading(&ids, cascade)?;
        for id in ids {
            if self.lock_table(id).await?.is_none() {
                continue;
            }
            // Its indexes go with it (the catalog drops them).
            self.catalog_op(CatalogOp::DropTable { table_id: id })?;
        }
        Ok(StatementResult::none(0))
    }

    pub(crate) async fn alter_table(&mut self, alter: ast::AlterTable) -> Result<StatementResult> {
        self.lock_ddl().await;
        let def = match self.resolve(&alter.name) {
            Ok(d) => d,
            Err(Error::NotFound(_)) if alter.if_exists => return Ok(StatementResult::none(0)),
            Err(e) => return Err(e),
        };
        let Some(mut def) = self.lock_table(def.id).await? else {
            return Err(Error::NotFound(format!(
                "relation \"{}\".\"{}\" does not exist",
                def.workspace_id, def.name
            )));
        };
        let row_count = self
            .tables
            .get(&def.id)
            .map_or(0, |t| t.version.row_count());
        for op in &alter.operations {
            match op {
                AlterTableOperation::AddColumn {
                    if_not_exists,
                    column_def,
                    column_position: None,
                    ..
                } => {
                    let name = normalize(&column_def.name);
                    if def.column(&name).is_some() {
                        if *if_not_exists {
                            continue;
                        }
                        return Err(Error::Conflict(format!(
                            "column \"{name}\" of relation \"{}\" already exists",
                            def.name
                        )));
                    }
                    let mut col = self.column_def(&mut def, column_def)?;
                    if row_count > 0 {
                        if matches!(col.default, Some(ColumnDefault::Sequence { .. })) {
                            return bad("cannot add a SERIAL column to a table that has rows");
                        }
                        if let Some(ColumnDefault::Expr { sql }) = &col.default
                            && self.volatile_default(sql)
                        {
                            // PostgreSQL evaluates it for each row; Tarn keeps one value
                            // for the rows already there, which would be the same for all.
                            return bad(format!(
                                "cannot add column \"{name}\" with a volatile DEFAULT \
                                 ({sql}) to a table that has rows: each row would get the \
                                 same value; add it without the default, then UPDATE"
                            ));
                        }
                        if let Some(ColumnDefault::Expr { .. }) = &col.default {
                            // In the column's type (what an INSERT would store), so that
                            // the rows already there read it back as one.
                            let value = self.default_array(&def, &col, 1).await?;
                            let value = default_in_type(&value, &col)?;
                            let field = crate::ast::types::column_field(&col.name, &col.ty, true);
                            let v = crate::value::encode::encode_value(&field, &value, 0)?;
                            col.missing = (!v.is_null()).then_some(v);
                        }
                        if col.missing.is_none() && !col.nullable {
                            return bad(format!(
                                "column \"{name}\" of relation \"{}\" contains null values",
                                def.name
                            ));
                        }
                        if (col.unique || col.primary_key) && col.missing.is_some() && row_count > 1
                        {
                            return Err(Error::Conflict(format!(
                                "could not create unique index: key ({name}) is duplicated in relation \"{}\"",
                                def.name
                            )));
                        }
                    }
                    push_column(&mut def, col)?;
                }
                AlterTableOperation::DropColumn {
                    column_names,
                    if_exists,
                    ..
                } => {
                    for c in column_names {
                        let name = normalize(c);
                        let Some(col) = def.column(&name).cloned() else {
                            if *if_exists {
                                continue;
                            }
                            return Err(Error::BadRequest(format!(
                                "column \"{name}\" of relation \"{}\" does not exist",
                                def.name
                            )));
                        };
                        if def.columns.len() == 1 {
                            return bad("cannot drop the only column of a table");
                        }
                        self.refuse_if_views_read(def.id, &format!("drop column \"{name}\" of"))?;
                        def.columns.retain(|x| x.id != col.id);
                        def.unique_constraints
                            .retain(|(_, cols)| !cols.contains(&col.id));
                    }
                }
                AlterTableOperation::RenameColumn {
                    old_column_name,
                    new_column_name,
                } => {
                    let old = normalize(old_column_name);
                    let new = normalize(new_column_name);
                    check_column_name(&new)?;
                    if def.column(&new).is_some() {
                        return Err(Error::Conflict(format!(
                            "column \"{new}\" of relation \"{}\" already exists",
                            def.name
                        )));
                    }
                    if def.column(&old).is_some() {
                        self.refuse_if_views_read(def.id, &format!("rename column \"{old}\" of"))?;
                    }
                    let Some(col) = def.columns.iter_mut().find(|c| c.name == old) else {
                        return Err(Error::BadRequest(format!(
                            "column \"{old}\" of relation \"{}\" does not exist",
                            def.name
                        )));
                    };
                    col.name = new;
                }
                AlterTableOperation::RenameTable { table_name } => {
                    let target = match table_name {
                        ast::RenameTableNameKind::As(n) | ast::RenameTableNameKind::To(n) => n,
                    };
                    let parts = name_parts(target)?;
                    let new = match parts.as_slice() {
                        [t] => t.clone(),
                        [ws, t] if *ws == def.workspace_id => t.clone(),
                        _ => {
                            return bad(
                                "ALTER TABLE … RENAME TO cannot move a table to another workspace",
                            );
                        }
                    };
                    check_table_name(&new)?;
                    if new != def.name {
                        self.refuse_if_views_read(def.id, "rename")?;
                    }
                    if self
                        .catalog
                        .relation_exists(&self.org, &def.workspace_id, &new)
                    {
                        return Err(Error::Conflict(format!(
                            "relation \"{}\".\"{new}\" already exists",
                            def.workspace_id
                        )));
                    }
                    def.name = new;
                }
                other => return bad(format!("ALTER TABLE operation not supported: {other}")),
            }
        }
        if let Some(store) = self.tables.get(&def.id).and_then(|t| t.store.clone()) {
            // Constraint columns may have changed; indexes rebuild on next use.
            store.reset_key_indexes();
        }
        self.catalog_op(CatalogOp::ReplaceTable(def))?;
        Ok(StatementResult::none(0))
    }
}

/// Adds a column with the constraints declared on it.
fn push_column(def: &mut TableDef, col: ColumnDef) -> Result<()> {
    check_column_name(&col.name)?;
    let (unique, primary, name) = (col.unique, col.primary_key, col.name.clone());
    def.columns.push(col);
    if primary {
        add_constraint(def, std::slice::from_ref(&name), true)?;
    }
    if unique {
        add_constraint(def, &[name], false)?;
    }
    Ok(())
}

/// Adds a PRIMARY KEY or UNIQUE constraint over named columns, with PostgreSQL's name.
fn add_constraint(def: &mut TableDef, names: &[String], primary: bool) -> Result<()> {
    let mut ids = Vec::with_capacity(names.len());
    for n in names {
        let Some(col) = def.columns.iter_mut().find(|c| c.name == *n) else {
            return Err(Error::BadRequest(format!(
                "column \"{n}\" named in key does not exist"
            )));
        };
        if primary {
            col.nullable = false;
            col.primary_key = true;
        }
        ids.push(col.id);
    }
    let cname = if primary {
        if def
            .unique_constraints
            .iter()
            .any(|(n, _)| n.ends_with("_pkey"))
        {
            return bad(format!(
                "multiple primary keys for table \"{}\" are not allowed",
                def.name
            ));
        }
        format!("{}_pkey", def.name)
    } else {
        format!("{}_{}_key", def.name, names.join("_"))
    };
    if !def.unique_constraints.iter().any(|(_, c)| *c == ids) || primary {
        def.unique_constraints.push((cname, ids));
    }
    Ok(())
}

impl Txn<'_> {
    /// Whether a DEFAULT's SQL calls a function the session knows as volatile (a new
    /// value each time it runs: `random()`, `uuid()`, …).
    fn volatile_default(&self, sql: &str) -> bool {
        use datafusion::logical_expr::Volatility;
        use datafusion::sql::sqlparser::ast::{Expr, visit_expressions};
        let dialect = crate::ast::dialect::EngineDialect::default();
        let Ok(expr) = datafusion::sql::sqlparser::parser::Parser::new(&dialect)
            .try_with_sql(sql)
            .and_then(|mut p| p.parse_expr())
        else {
            return false;
        };
        let functions = self.shared.session.scalar_functions();
        visit_expressions(&expr, |e| match e {
            Expr::Function(f)
                if f.name
                    .0
                    .last()
                    .and_then(|p| p.as_ident())
                    .and_then(|i| functions.get(&i.value.to_lowercase()))
                    .is_some_and(|u| u.signature().volatility == Volatility::Volatile) =>
            {
                std::ops::ControlFlow::Break(())
            }
            _ => std::ops::ControlFlow::Continue(()),
        })
        .is_break()
    }
}
