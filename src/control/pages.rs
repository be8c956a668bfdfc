//! Small HTML pages: problem explanations (`/_weir/problems/<kind>`) and a plain index.

use crate::body::Body;
use crate::problem::{Problem, ProblemKind};
use http::{Response, StatusCode};

pub fn problem_page(kind: &str) -> Result<Response<Body>, Problem> {
    let Some(p) = ProblemKind::parse(kind).map(ProblemKind::page) else {
        return Err(Problem::new(
            StatusCode::NOT_FOUND,
            ProblemKind::NotFound,
            format!("no problem type `{kind}`"),
        ));
    };
    let html = format!(
        "<!doctype html><meta charset=utf-8><title>{t}</title><h1>{t}</h1><p><b>Cause.</b> {c}</p><p><b>What to do.</b> {f}</p><p><a href=\"/_weir/\">Weir dashboard</a></p>",
        t = p.title,
        c = p.cause,
        f = p.fix
    );
    Ok(super::text("text/html; charset=utf-8", html))
}
