//! The JSON endpoints: health, the caller, organizations and members, workspaces and
//! tables, and SQL.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::extract::{Authed, JsonBody, created};
use crate::state::AppState;

pub(crate) async fn health(State(s): State<AppState>) -> ApiResult<Json<tarn::Status>> {
    Ok(Json(s.tarn.health().await?))
}

pub(crate) async fn ready(State(s): State<AppState>) -> ApiResult<Json<tarn::Status>> {
    Ok(Json(s.tarn.ready().await?))
}

pub(crate) async fn me(Authed(s): Authed) -> ApiResult<Json<tarn::User>> {
    Ok(Json(s.me().await?))
}

pub(crate) async fn organizations(Authed(s): Authed) -> ApiResult<Json<Vec<tarn::Organization>>> {
    Ok(Json(s.organizations().await?))
}

#[derive(Deserialize)]
// What a wrong body is told it should be (not the Rust type's name).
#[serde(expecting = "a JSON object {\"id\": …, \"name\": …}")]
pub(crate) struct IdNameRequest {
    id: String,
    name: String,
}

#[derive(Deserialize)]
// What a wrong body is told it should be (not the Rust type's name).
#[serde(expecting = "a JSON object {\"name\": …}")]
pub(crate) struct NameRequest {
    name: Option<String>,
}

pub(crate) async fn create_organization(
    Authed(s): Authed,
    JsonBody(r, _held): JsonBody<IdNameRequest>,
) -> ApiResult<impl IntoResponse> {
    Ok(created(s.create_organization(&r.id, &r.name).await?))
}

pub(crate) async fn organization(
    Authed(s): Authed,
    Path(org): Path<String>,
) -> ApiResult<Json<tarn::OrganizationDetail>> {
    Ok(Json(s.organization(&org).await?))
}

/// `name` is optional here (the reference): without it the organization keeps its name
/// (renamed to itself, so the role is checked as for a rename) and `{id, name}` is
/// returned.
pub(crate) async fn update_organization(
    Authed(s): Authed,
    Path(org): Path<String>,
    JsonBody(r, _held): JsonBody<NameRequest>,
) -> ApiResult<Json<tarn::IdName>> {
    let name = match r.name {
        Some(name) => name,
        None => s.organization(&org).await?.organization.name,
    };
    Ok(Json(s.update_organization(&org, &name).await?))
}

pub(crate) async fn delete_organization(
    Authed(s): Authed,
    Path(org): Path<String>,
) -> ApiResult<StatusCode> {
    s.delete_organization(&org).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn members(
    Authed(s): Authed,
    Path(org): Path<String>,
) -> ApiResult<Json<tarn::MemberList>> {
    Ok(Json(s.members(&org).await?))
}

#[derive(Deserialize)]
// What a wrong body is told it should be (not the Rust type's name).
#[serde(expecting = "a JSON object {\"email\": …, \"role\": …}")]
pub(crate) struct AddMemberRequest {
    email: String,
    role: String,
}

#[derive(Deserialize)]
// What a wrong body is told it should be (not the Rust type's name).
#[serde(expecting = "a JSON object {\"role\": …}")]
pub(crate) struct RoleRequest {
    role: String,
}

pub(crate) async fn add_member(
    Authed(s): Authed,
    Path(org): Path<String>,
    JsonBody(r, _held): JsonBody<AddMemberRequest>,
) -> ApiResult<impl IntoResponse> {
    Ok(created(s.add_member(&org, &r.email, &r.role).await?))
}

pub(crate) async fn update_member(
    Authed(s): Authed,
    Path((org, user)): Path<(String, String)>,
    JsonBody(r, _held): JsonBody<RoleRequest>,
) -> ApiResult<Json<tarn::MemberRole>> {
    Ok(Json(s.update_member(&org, &user, &r.role).await?))
}

pub(crate) async fn remove_member(
    Authed(s): Authed,
    Path((org, user)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    s.remove_member(&org, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------
// Workspaces and tables

pub(crate) async fn workspaces(Authed(s): Authed) -> ApiResult<Json<tarn::WorkspaceList>> {
    Ok(Json(s.workspaces().await?))
}

pub(crate) async fn workspace(
    Authed(s): Authed,
    Path(ws): Path<String>,
) -> ApiResult<Json<tarn::WorkspaceDetail>> {
    Ok(Json(s.workspace(&ws).await?))
}

pub(crate) async fn create_workspace(
    Authed(s): Authed,
    JsonBody(r, _held): JsonBody<IdNameRequest>,
) -> ApiResult<impl IntoResponse> {
    Ok(created(s.create_workspace(&r.id, &r.name).await?))
}

/// `name` is required (SPEC §1).
pub(crate) async fn update_workspace(
    Authed(s): Authed,
    Path(ws): Path<String>,
    JsonBody(r, _held): JsonBody<NameRequest>,
) -> ApiResult<Json<tarn::IdName>> {
    let name = r
        .name
        .ok_or_else(|| ApiError::bad("field \"name\" is required"))?;
    Ok(Json(s.update_workspace(&ws, &name).await?))
}

pub(crate) async fn delete_workspace(
    Authed(s): Authed,
    Path(ws): Path<String>,
) -> ApiResult<StatusCode> {
    s.delete_workspace(&ws).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn tables(
    Authed(s): Authed,
    Path(ws): Path<String>,
) -> ApiResult<Json<Vec<tarn::TableSummary>>> {
    Ok(Json(s.tables(&ws).await?))
}

pub(crate) async fn table(
    Authed(s): Authed,
    Path((ws, table)): Path<(String, String)>,
) -> ApiResult<Json<tarn::TableDetails>> {
    Ok(Json(s.table(&ws, &table).await?))
}

pub(crate) async fn table_named_query(
    Authed(s): Authed,
    Path(ws): Path<String>,
) -> ApiResult<Json<tarn::TableDetails>> {
    Ok(Json(s.table(&ws, "query").await?))
}

pub(crate) async fn drop_table(
    Authed(s): Authed,
    Path((ws, table)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    s.drop_table(&ws, &table).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn drop_table_named_query(
    Authed(s): Authed,
    Path(ws): Path<String>,
) -> ApiResult<StatusCode> {
    s.drop_table(&ws, "query").await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------
// SQL

#[derive(Deserialize)]
// What a wrong body is told it should be (not the Rust type's name).
#[serde(expecting = "a JSON object {\"query\": …, \"params\": […]}")]
pub(crate) struct QueryRequest {
    query: String,
    #[serde(default)]
    params: Option<Vec<Value>>,
}

#[derive(Deserialize)]
// What a wrong body is told it should be (not the Rust type's name).
#[serde(expecting = "a JSON object {\"query\": …, \"params_batch\": [[…], …]}")]
pub(crate) struct BatchRequest {
    query: String,
    params_batch: Vec<Vec<Value>>,
}

pub(crate) async fn query(
    State(st): State<AppState>,
    Authed(s): Authed,
    Path(ws): Path<String>,
    JsonBody(r, _held): JsonBody<QueryRequest>,
) -> ApiResult<Response> {
    let params = r.params.unwrap_or_default();
    let run = async move { s.query(&ws, &r.query, &params).await };
    // The body stays charged to query_memory until it is written to the client.
    let body = st.statement(run).await?.into_json()?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

pub(crate) async fn query_batch(
    State(st): State<AppState>,
    Authed(s): Authed,
    Path(ws): Path<String>,
    JsonBody(r, _held): JsonBody<BatchRequest>,
) -> ApiResult<Json<tarn::BatchResult>> {
    let run = async move { s.query_batch(&ws, &r.query, &r.params_batch).await };
    Ok(Json(st.statement(run).await?))
}
