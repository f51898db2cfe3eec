//! Unit tests of the SQL Server conformance harness's decision: which server a run uses (a
//! URL, the parent's, a Docker container, or none with the reason). Needs no server and no
//! Docker: the Docker probe is a stand-in.

#[path = "common/source.rs"]
mod source;

use std::cell::Cell;
use std::path::PathBuf;

use source::{decide, docker_endpoint, split_image, switch_on, DockerEndpoint, Inputs, Source, ENV_DOCKER, ENV_URL};

const URL: &str = "server=tcp:db,1433;user=sa;password=x";

fn reachable() -> Result<(), String> {
    Ok(())
}

fn unreachable() -> Result<(), String> {
    Err("/var/run/docker.sock: No such file or directory".to_string())
}

#[test]
fn a_url_wins_and_docker_is_not_even_probed() {
    let asked = Cell::new(false);
    let probe = || {
        asked.set(true);
        Ok(())
    };
    let inputs = Inputs { url: Some(URL.to_string()), docker: true, ..Default::default() };
    assert_eq!(decide(&inputs, probe), Source::Url(URL.to_string()));
    assert!(!asked.get());
}

#[test]
fn a_child_process_uses_its_parents_server_and_starts_nothing() {
    let inputs = Inputs { child: true, docker: true, ..Default::default() };
    assert_eq!(decide(&inputs, || panic!("a child must not probe Docker")), Source::Parent);
    let inputs = Inputs { child: true, url: Some(URL.to_string()), ..Default::default() };
    assert_eq!(decide(&inputs, reachable), Source::Parent);
}

#[test]
fn the_switch_with_docker_reachable_starts_a_container() {
    let inputs = Inputs { docker: true, ..Default::default() };
    assert_eq!(decide(&inputs, reachable), Source::Docker);
}

#[test]
fn the_switch_without_docker_is_ignored_with_the_reason() {
    let inputs = Inputs { docker: true, ..Default::default() };
    let Source::Unavailable(why) = decide(&inputs, unreachable) else { panic!("expected Unavailable") };
    assert!(why.contains(ENV_DOCKER) && why.contains("no Docker engine is reachable"), "{why}");
    assert!(why.contains("docker.sock"), "the probe's own reason is kept: {why}");
    assert!(why.contains(ENV_URL), "the other way is named: {why}");
}

#[test]
fn neither_is_ignored_with_both_ways_named_and_docker_untouched() {
    let Source::Unavailable(why) = decide(&Inputs::default(), || panic!("no switch, no probe")) else {
        panic!("expected Unavailable")
    };
    assert!(why.contains(ENV_URL) && why.contains(ENV_DOCKER), "{why}");
    assert!(!why.contains("password=x"));
}

#[test]
fn listing_the_cases_starts_nothing() {
    let inputs = Inputs { docker: true, listing: true, ..Default::default() };
    assert!(matches!(decide(&inputs, || panic!("listing must not probe")), Source::Unavailable(_)));
}

#[test]
fn the_switch_reads_the_usual_spellings() {
    for on in ["1", "true", "TRUE", "yes", "on", " 1 "] {
        assert!(switch_on(Some(on)), "{on}");
    }
    for off in ["0", "false", "", "no", "off", "2"] {
        assert!(!switch_on(Some(off)), "{off}");
    }
    assert!(!switch_on(None));
}

#[test]
fn the_docker_endpoint_follows_docker_host() {
    assert_eq!(docker_endpoint(None).unwrap(), DockerEndpoint::Unix(PathBuf::from("/var/run/docker.sock")));
    assert_eq!(docker_endpoint(Some("  ")).unwrap(), DockerEndpoint::Unix(PathBuf::from("/var/run/docker.sock")));
    assert_eq!(
        docker_endpoint(Some("unix:///run/user/1000/docker.sock")).unwrap(),
        DockerEndpoint::Unix(PathBuf::from("/run/user/1000/docker.sock"))
    );
    assert_eq!(docker_endpoint(Some("tcp://10.0.0.5:2376")).unwrap(), DockerEndpoint::Tcp("10.0.0.5:2376".into()));
    assert_eq!(docker_endpoint(Some("tcp://dockerhost")).unwrap(), DockerEndpoint::Tcp("dockerhost:2375".into()));
    assert!(docker_endpoint(Some("ssh://user@host")).is_err());
}

#[test]
fn images_split_into_repository_and_tag() {
    assert_eq!(
        split_image("mcr.microsoft.com/mssql/server:2022-latest"),
        ("mcr.microsoft.com/mssql/server".to_string(), "2022-latest".to_string())
    );
    assert_eq!(split_image("localhost:5000/mssql"), ("localhost:5000/mssql".to_string(), "latest".to_string()));
    assert_eq!(split_image("mssql:2022"), ("mssql".to_string(), "2022".to_string()));
}
