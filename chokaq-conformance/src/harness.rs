//! How a backend crate plugs into the suite: the [`Harness`] trait and [`UrlHarness`], the
//! ready-made harness for "a URL plus a fresh schema" backends.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use chokaq_core::testing::TestSupport;
use chokaq_core::{validate, Backend, Error, ErrorKind, Result};
use futures::future::BoxFuture;
use tokio::sync::OnceCell;

/// What the suite drives: a backend plus its test support. Implemented for every type that
/// implements both, never by hand.
pub trait TestBackend: Backend + TestSupport {}

impl<T: Backend + TestSupport + ?Sized> TestBackend for T {}

/// Env var naming the schema a child process must reopen (set by [`UrlHarness::child_env`]).
pub const ENV_CHILD_SCHEMA: &str = "CHOKAQ_CONFORMANCE_SCHEMA";
/// Env var carrying the URL to a child process (set by [`UrlHarness::child_env`]; never
/// printed).
pub const ENV_CHILD_URL: &str = "CHOKAQ_CONFORMANCE_URL";
/// Comma list of backend names whose absence is a failure instead of an ignore.
pub const ENV_REQUIRE: &str = "CHOKAQ_TEST_REQUIRE";

/// One backend under test, as the suite sees it.
///
/// The suite calls [`Harness::open`] once per run and shares the backend between all cases
/// (each case works in its own queues). Child OS processes (the multi-process stress cases)
/// re-execute the current binary with [`Harness::child_env`] added to their environment; the
/// child's `main` builds its harness the same way, and that harness must then open the *same*
/// store (for [`UrlHarness`]: same URL, same schema, no migration, no drop).
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The backend's short name, matched against `CHOKAQ_TEST_REQUIRE` (e.g. `postgres`).
    fn name(&self) -> &str;

    /// `Some(reason)` when the backend is not configured at all (no URL, no server here);
    /// every case is then ignored with this reason (or fails, if required).
    fn unavailable_reason(&self) -> Option<String> {
        None
    }

    /// The isolated, migrated backend the cases run against. An error of kind
    /// [`ErrorKind::Unavailable`] means "not reachable" (cases are ignored unless required);
    /// any other error fails every case.
    async fn open(&self) -> Result<Arc<dyn TestBackend>>;

    /// Environment a child process needs so that its harness opens the same store.
    fn child_env(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Where the cases run, as the runner binary's first line shows it (e.g.
    /// `schema chokaq_t_ab12`); never a URL or a password. `None`: not shown.
    fn store(&self) -> Option<String> {
        None
    }

    /// Called once after the run (drop the schema the harness created).
    async fn finish(&self) -> Result<()> {
        Ok(())
    }
}

/// Whether `CHOKAQ_TEST_REQUIRE` names `backend`.
pub fn is_required(backend: &str) -> bool {
    std::env::var(ENV_REQUIRE).map(|v| v.split(',').any(|s| s.trim().eq_ignore_ascii_case(backend))).unwrap_or(false)
}

/// A fresh schema name, `chokaq_t_<16 hex digits>`.
pub fn fresh_schema_name() -> String {
    format!("chokaq_t_{:016x}", rand::random::<u64>())
}

/// Builds a backend from a URL and a schema name, without migrating it.
pub type ConnectFn = Arc<dyn Fn(String, String) -> BoxFuture<'static, Result<Arc<dyn TestBackend>>> + Send + Sync>;

/// The harness for backends addressed by a URL and a schema: opens a fresh schema
/// `chokaq_t_<hex>` (or the one given with [`UrlHarness::schema`]), migrates it, and drops a
/// fresh schema in [`Harness::finish`]. In a child process (env [`ENV_CHILD_SCHEMA`] set) it
/// reopens the parent's schema and URL and never migrates or drops.
///
/// `Debug` never shows the URL.
pub struct UrlHarness {
    name: String,
    url: Option<String>,
    schema: String,
    fresh: bool,
    child: bool,
    connect: ConnectFn,
    opened: OnceCell<Arc<dyn TestBackend>>,
}

impl fmt::Debug for UrlHarness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UrlHarness")
            .field("name", &self.name)
            .field("url", &self.url.as_ref().map(|_| "<redacted>"))
            .field("schema", &self.schema)
            .field("fresh", &self.fresh)
            .field("child", &self.child)
            .finish_non_exhaustive()
    }
}

impl UrlHarness {
    /// A harness for backend `name` at `url` (`None`: not configured, every case ignored).
    /// `connect(url, schema)` builds the backend; the harness migrates it.
    pub fn new<F>(name: impl Into<String>, url: Option<String>, connect: F) -> Self
    where
        F: Fn(String, String) -> BoxFuture<'static, Result<Arc<dyn TestBackend>>> + Send + Sync + 'static,
    {
        let child_schema = std::env::var(ENV_CHILD_SCHEMA).ok().filter(|s| !s.is_empty());
        let child = child_schema.is_some();
        let url = if child { std::env::var(ENV_CHILD_URL).ok().or(url) } else { url };
        UrlHarness {
            name: name.into(),
            url,
            fresh: !child,
            schema: child_schema.unwrap_or_else(fresh_schema_name),
            child,
            connect: Arc::new(connect),
            opened: OnceCell::new(),
        }
    }

    /// Uses this existing schema instead of a fresh one (created and migrated if missing,
    /// never dropped). Ignored in a child process.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        if !self.child {
            self.schema = schema.into();
            self.fresh = false;
        }
        self
    }

    /// The schema the suite runs in.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }
}

#[async_trait]
impl Harness for UrlHarness {
    fn name(&self) -> &str {
        &self.name
    }

    fn unavailable_reason(&self) -> Option<String> {
        match self.url {
            None => Some(format!("{} is not configured (no URL)", self.name)),
            Some(_) => None,
        }
    }

    async fn open(&self) -> Result<Arc<dyn TestBackend>> {
        let b =
            self.opened
                .get_or_try_init(|| async {
                    validate::schema_name(&self.schema)?;
                    let url = self.url.clone().ok_or_else(|| {
                        Error::new(ErrorKind::Unavailable, format!("{} is not configured", self.name))
                    })?;
                    let backend = (self.connect)(url, self.schema.clone()).await?;
                    if !self.child {
                        backend.migrate().await?;
                    }
                    Ok::<_, Error>(backend)
                })
                .await?;
        Ok(b.clone())
    }

    fn store(&self) -> Option<String> {
        Some(format!("schema {}", self.schema))
    }

    fn child_env(&self) -> Vec<(String, String)> {
        let mut env = vec![(ENV_CHILD_SCHEMA.to_string(), self.schema.clone())];
        if let Some(url) = &self.url {
            env.push((ENV_CHILD_URL.to_string(), url.clone()));
        }
        env
    }

    async fn finish(&self) -> Result<()> {
        if self.fresh && !self.child {
            if let Some(b) = self.opened.get() {
                b.drop_schema().await?;
            }
        }
        Ok(())
    }
}
