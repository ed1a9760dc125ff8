//! The OCI image that hack/image.sh builds: from the image's own filesystem, its
//! binary answers --version, and a pull-mode syncer syncs a simulated cluster with the
//! image's libraries and nothing of this machine's. It runs from
//! target/image/unpacked/rootfs under chroot: as root, or in a user namespace of its
//! own (`unshare -r`), or through `sudo -n`. Without the image or any of those it says
//! so and passes, unless FLOTILLA_REQUIRE_IMAGE is set, as CI sets it.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;

const EAST: &str = "name: east\nnodes:\n  - {count: 2, cpu: \"4\", memory: 8Gi, pods: 110}\nstartupDelay: 200ms\n";

/// The image's filesystem and the command that chroots into it, if this test can run.
fn rootfs() -> Option<(PathBuf, Vec<&'static str>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/image/unpacked/rootfs");
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(1).map(str::to_string)));
    let works = |cmd: &[&str]| Command::new(cmd[0]).args(&cmd[1..]).arg("/").arg("true").output().is_ok_and(|o| o.status.success());
    let chroot = if uid.as_deref() == Some("0") {
        Some(vec!["chroot"])
    } else {
        [vec!["unshare", "-r", "chroot"], vec!["sudo", "-n", "chroot"]].into_iter().find(|c| works(c))
    };
    let why = if !root.join("usr/local/bin/flotilla").exists() {
        format!("no image at {}: build it with hack/image.sh", root.display())
    } else if let Some(chroot) = chroot {
        return Some((root, chroot));
    } else {
        "running from the image's filesystem takes chroot: root, `unshare -r` or `sudo -n`, and none works here".to_string()
    };
    if std::env::var_os("FLOTILLA_REQUIRE_IMAGE").is_some() {
        panic!("FLOTILLA_REQUIRE_IMAGE is set, but {why}");
    }
    eprintln!("skipping: {why}");
    None
}

#[test]
fn the_image_runs_and_a_pull_syncer_from_it_syncs_a_cluster() {
    let Some((root, chroot)) = rootfs() else { return };
    let in_image = |args: &[String]| {
        let mut cmd = Command::new(chroot[0]);
        cmd.args(&chroot[1..]).arg(&root).args(args);
        cmd
    };
    let version = in_image(&["/usr/local/bin/flotilla".into(), "--version".into()]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), concat!("flotilla ", env!("CARGO_PKG_VERSION")), "{version:?}");

    let f = Flotilla::start_with(&["--no-scheduler"]);
    let east = SimCluster::start(EAST);
    let o = f.flotilla(&["cluster", "register", "east", "--pull", "--kubeconfig", east.kubeconfig().to_str().unwrap()]);
    assert!(o.ok && o.stdout.contains("image: localhost/flotilla:"), "the manifest names the image hack/image.sh builds: {o:?}");
    let upstream = register_pull(&f, &east);
    assert!(f.flotilla(&["workspace", "create", "demo"]).ok);

    // The syncer sees only the image's filesystem, and its own files in /tmp there.
    let inside = tempfile::tempdir_in(root.join("tmp")).unwrap();
    std::fs::copy(&upstream, inside.path().join("upstream")).unwrap();
    std::fs::copy(east.kubeconfig(), inside.path().join("downstream")).unwrap();
    let at = |name: &str| format!("/tmp/{}/{name}", inside.path().file_name().unwrap().to_str().unwrap());
    let args = [
        "/usr/local/bin/flotilla".to_string(),
        "--data-dir".into(),
        at("data"),
        "syncer".into(),
        "--sync-target".into(),
        "east".into(),
        "--heartbeat-interval".into(),
        "500ms".into(),
        "--upstream-kubeconfig".into(),
        at("upstream"),
        "--downstream-kubeconfig".into(),
        at("downstream"),
    ];
    let log = f.data_dir().join("image-syncer.log");
    let mut cmd = in_image(&args);
    let what: Vec<&str> = args.iter().map(String::as_str).collect();
    let (syncer, _) = spawn_ready_cmd(&mut cmd, &what, &log);
    let _syncer = fleet::Killed(syncer);

    f.apply(&["--context", "demo", "-n", "default"], &assigned(deployment("web").replicas(2).cpu("100m"), 2));
    let o = f.kubectl(&["--context", "demo", "rollout", "status", "deploy/web", "--timeout=30s"]);
    assert!(o.ok, "{o:?}\nthe syncer's log:\n{}", tail(&std::fs::read_to_string(&log).unwrap_or_default()));
    assert!(copies(&east).ends_with("web=2 nginx:1.27"), "{}", copies(&east));
    wait_until(
        "a heartbeat from the image's syncer",
        Duration::from_secs(30),
        || f.k(&["--context", "root", "get", "st", "east", "-o", "jsonpath={.status.workloads} {.status.cpu}"]),
        |st| st.starts_with("1 ") && st.len() > 2,
    );
}
