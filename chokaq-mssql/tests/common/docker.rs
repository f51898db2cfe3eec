//! SQL Server 2022 in Docker, through testcontainers, for one conformance binary: started
//! before the run, stopped and removed after it.

use std::time::{Duration, Instant};

use chokaq_mssql::{MssqlBackend, MssqlConfig};
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use super::source::{split_image, DEFAULT_IMAGE, ENV_IMAGE};

/// A running container and the connection string of its `sa` login (never printed).
pub struct Server {
    container: ContainerAsync<GenericImage>,
    pub url: String,
}

/// Starts the image (`CHOKAQ_TEST_MSSQL_IMAGE`, default SQL Server 2022) with a random `sa`
/// password, waits for its ready line, then until a login succeeds (at most two minutes).
pub async fn start() -> Result<Server, String> {
    let image = std::env::var(ENV_IMAGE).ok().filter(|s| !s.trim().is_empty()).unwrap_or(DEFAULT_IMAGE.to_string());
    let (repository, tag) = split_image(&image);
    // Upper and lower case letters, digits and a symbol: SQL Server's password policy.
    let password = format!("Ck-{:016x}-Zq7", rand::random::<u64>());
    eprintln!("[chokaq-mssql] starting {image} through testcontainers");
    let container = GenericImage::new(repository, tag)
        .with_exposed_port(1433.tcp())
        .with_wait_for(WaitFor::message_on_stdout("SQL Server is now ready for client connections"))
        .with_env_var("ACCEPT_EULA", "Y")
        .with_env_var("MSSQL_PID", "Developer")
        .with_env_var("MSSQL_SA_PASSWORD", password.as_str())
        .with_startup_timeout(Duration::from_secs(300))
        .start()
        .await
        .map_err(|e| format!("could not start {image}: {e}"))?;
    let server = async {
        let host = container.get_host().await.map_err(|e| e.to_string())?;
        let port = container.get_host_port_ipv4(1433.tcp()).await.map_err(|e| e.to_string())?;
        let url = format!(
            "server=tcp:{host},{port};user=sa;password={{{password}}};TrustServerCertificate=true;Encrypt=false"
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let cfg = MssqlConfig::new(&url).map_err(|e| e.to_string())?;
            match MssqlBackend::connect(cfg).await {
                Ok(_) => break,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("[chokaq-mssql] waiting for SQL Server to accept logins: {e}");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                Err(e) => return Err(format!("SQL Server in {image} did not accept a login: {e}")),
            }
        }
        eprintln!("[chokaq-mssql] SQL Server is up on {host}:{port}");
        Ok::<_, String>(url)
    }
    .await;
    match server {
        Ok(url) => Ok(Server { container, url }),
        Err(e) => {
            let _ = container.rm().await;
            Err(e)
        }
    }
}

impl Server {
    /// Stops and removes the container.
    pub async fn stop(self) {
        let id = self.container.id().to_string();
        match self.container.rm().await {
            Ok(()) => eprintln!("[chokaq-mssql] SQL Server container {id} stopped and removed"),
            Err(e) => eprintln!("[chokaq-mssql] could not remove SQL Server container {id}: {e}"),
        }
    }
}
