//! The web dashboard in a real browser (Debian's headless Chromium, driven through
//! Playwright by tests/browser/driver.mjs): sign-in, the fleet of `flotilla up`, a
//! failover seen live without a reload, and a workspace's session that sees only its
//! workspace and cannot write. axe-core checks each view for WCAG 2 A and AA violations. Screenshots go to the test's temporary directory, and
//! to FLOTILLA_SCREENSHOTS when it is set (hack/screenshots.sh, for docs/images).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::browser::Browser;
use common::*;

const DEADLINE: Duration = Duration::from_secs(60);
/// `up`'s heartbeats in this test: the page must show a loss within the grace plus 2 s.
const BEAT: &str = "1s";
const GRACE: Duration = Duration::from_secs(4);

fn screenshot(b: &mut Browser, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.png"));
    b.screenshot(&path, false);
    if let Some(docs) = std::env::var_os("FLOTILLA_SCREENSHOTS") {
        std::fs::copy(&path, Path::new(&docs).join(format!("dashboard-{name}.png"))).unwrap();
    }
    path
}

/// The page's errors, but for the refusal of a wrong token, which the test provoked.
fn unexpected_errors(b: &mut Browser) -> Vec<String> {
    b.errors().into_iter().filter(|e| !e.contains("status of 401")).collect()
}

/// `flotilla up`, stopped as Ctrl-C stops it when the test ends, pass or fail: `up`
/// then stops its clusters, those `flotilla drill restore` started again included,
/// which a SIGKILL would leave running.
struct Up(std::process::Child);

impl Drop for Up {
    fn drop(&mut self) {
        signal(self.0.id(), "INT");
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// No WCAG 2 A or AA violation that axe-core finds on the page as it is now.
fn assert_accessible(b: &mut Browser, what: &str) {
    let violations = b.accessibility_violations();
    assert!(violations.is_empty(), "{what}: {}", serde_json::to_string_pretty(&violations).unwrap_or_default());
}

/// `flotilla dashboard --no-open`: the dashboard's URL and the sign-in link.
fn dashboard_link(run: &dyn Fn(&[&str]) -> Out, extra: &[&str]) -> (String, String) {
    let mut args = vec!["dashboard", "--no-open"];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert!(o.ok, "flotilla dashboard: {o:?}");
    let url = o.stdout.lines().find_map(|l| l.strip_prefix("dashboard: ")).unwrap_or_else(|| panic!("no URL in {o:?}"));
    let link = o.stdout.lines().map(str::trim).find(|l| l.contains("#signin=")).unwrap_or_else(|| panic!("no link in {o:?}"));
    (url.to_string(), link.to_string())
}

/// Waits until the page has the cluster row `name` with `data-ready` = `ready`.
fn wait_cluster(b: &mut Browser, name: &str, ready: &str, timeout: Duration) {
    let sel = format!("#cluster-rows tr[data-cluster=\"{name}\"]");
    wait_for(&format!("the page to show cluster {name} Ready={ready}"), timeout, || {
        let seen = b.attr(&sel, "data-ready");
        if seen.as_deref() == Some(ready) {
            Ok(())
        } else {
            Err(format!("{seen:?}; rows: {:?}", b.texts("#cluster-rows tr")))
        }
    });
}

/// The `data-clusters` of workload row `key` (`ws/ns/name`), if the page shows it.
fn shown_clusters(b: &mut Browser, key: &str) -> Option<String> {
    b.attr(&format!(".vrow[data-workload=\"{key}\"]:not([hidden])"), "data-clusters")
}

#[test]
fn the_dashboard_shows_up_s_fleet_and_a_failover_live_without_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut b) = Browser::launch(&dir.path().join("browser.log")) else { return };
    let data = dir.path().join("data");
    let data_s = data.to_str().unwrap().to_string();
    let kubeconfig = data.join("admin.kubeconfig");
    let terminal = dir.path().join("terminal.txt");
    let (up, _) = spawn_ready_in(
        dir.path(),
        &["--data-dir", &data_s, "up", "--listen", "127.0.0.1:0", "--heartbeat-interval", BEAT, "--heartbeat-grace", "4s"],
        &terminal,
    );
    let up = Up(up);
    let log = || tail(&std::fs::read_to_string(data.join("logs/flotilla.log")).unwrap_or_default());
    let run = |args: &[&str]| {
        let mut all = vec!["--data-dir", data_s.as_str()];
        all.extend_from_slice(args);
        std::process::Command::new(bin()).args(&all).current_dir(dir.path()).output().map(Out::from).unwrap()
    };
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/");
    let o = kubectl_cmd(&kubeconfig, dir.path(), &["apply", "-f", examples]).output().map(Out::from).unwrap();
    assert!(o.ok, "kubectl apply: {o:?}");

    let (url, link) = dashboard_link(&run, &[]);
    assert!(link.starts_with(&format!("{url}#signin=fdl1.*.")), "{link}");

    // A wrong token is refused, with the server's reason, and the board stays hidden.
    b.goto(&url);
    assert_accessible(&mut b, "the sign-in page");
    b.fill("#token", "not-a-token");
    b.click("#sign-in-form button");
    let refused = wait_for("the refusal", DEADLINE, || match b.text("#sign-in-error") {
        Some(t) if !t.is_empty() => Ok(t),
        seen => Err(format!("{seen:?}")),
    });
    assert!(refused.contains("refused") && refused.contains("Unauthorized"), "{refused}");
    assert!(!b.visible("#board"), "the board shows after a refused sign-in");

    // The link signs in to the whole fleet: up's three clusters and the examples.
    b.goto(&link);
    for c in ["east", "west", "eu"] {
        wait_cluster(&mut b, c, "True", DEADLINE);
    }
    assert_eq!(b.attr("#scope", "class").as_deref(), Some("scope"));
    assert_eq!(b.text("#scope").as_deref(), Some("all workspaces"));
    // The token is off the address at once.
    let address = b.eval("location.href");
    assert!(!address.as_str().unwrap_or_default().contains("signin"), "{address}");
    let web = wait_for("web running on west and east", DEADLINE, || match shown_clusters(&mut b, "demo/default/web") {
        Some(c) if c.contains("west=") => Ok(c),
        seen => Err(format!("{seen:?}; rows: {:?}", b.texts(".vrow:not([hidden])"))),
    });
    assert!(shown_clusters(&mut b, "demo/default/api").is_some_and(|c| c == "eu=2"), "{:?}", b.texts(".vrow"));
    let huge = b.attr(".vrow[data-workload=\"demo/default/huge\"]", "data-state");
    assert_eq!(huge.as_deref(), Some("Pending"), "huge fits nowhere");
    assert_eq!(b.text("#connection").as_deref(), Some("live"));
    assert_accessible(&mut b, "the fleet");
    screenshot(&mut b, "overview");

    // The page is not reloaded from here on: this mark would be lost.
    b.eval("window.flotillaTestMark = 'kept'");
    let killed_at = Instant::now();
    let drill = std::process::Command::new(bin())
        .args(["--data-dir", &data_s, "drill", "kill", "west"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let budget = GRACE + Duration::from_secs(2);
    wait_cluster(&mut b, "west", "False", budget + Duration::from_secs(10));
    let moved =
        wait_for("web moved off west on the page", budget + Duration::from_secs(10), || match shown_clusters(&mut b, "demo/default/web") {
            Some(c) if !c.is_empty() && !c.contains("west") => Ok(c),
            seen => Err(format!("{seen:?}")),
        });
    let took = killed_at.elapsed();
    assert!(
        took <= budget,
        "the page showed west lost and web moved ({web} -> {moved}) {took:?} after the kill; the target is {budget:?}\n{}",
        log()
    );
    assert_eq!(b.eval("window.flotillaTestMark").as_str(), Some("kept"), "the page was reloaded");
    // The timeline tells the story: the loss, then the move, timed from the loss.
    let story = wait_for("the failover in the timeline", DEADLINE, || {
        let items = b.texts("#timeline-list li");
        let lost = items.iter().any(|i| i.contains("cluster west NotReady"));
        let moved = items.iter().any(|i| i.contains("Rescheduled demo/default/web") && i.contains("T+"));
        if lost && moved {
            Ok(items)
        } else {
            Err(format!("{items:?}"))
        }
    });
    wait_for("web Available again on the page", DEADLINE, || match b.attr(".vrow[data-workload=\"demo/default/web\"]", "data-state") {
        Some(s) if s == "Available" => Ok(()),
        seen => Err(format!("{seen:?}")),
    });
    // Its companions followed it: the Service has an address from each new cluster.
    wait_for("web's companions Available on the page", DEADLINE, || {
        match b.attr(".vrow[data-workload=\"demo/default/web\"]", "data-companions") {
            Some(s) if s == "Available" => Ok(()),
            seen => Err(format!("{seen:?}: {:?}", b.texts(".vrow[data-workload=\"demo/default/web\"] span"))),
        }
    });
    screenshot(&mut b, "failover");
    eprintln!("the page showed the failover {took:?} after the kill; timeline: {:?}", &story[..story.len().min(6)]);

    // The workload's own page, from its row.
    b.click(".vrow[data-workload=\"demo/default/web\"] a");
    wait_for("web's page", DEADLINE, || match b.text("#detail-title") {
        Some(t) if t.contains("default/web") && b.visible("#detail") => Ok(()),
        seen => Err(format!("{seen:?}")),
    });
    // Why here: the scheduler's core on its view, the same words as `flotilla explain`
    // (asked again until both read the same moment: free room moves while pods start).
    let mut first = true;
    let why = wait_for("the page's explanation to read as flotilla explain's", DEADLINE, || {
        if !first {
            b.click("#detail a[href=\"#\"]");
            b.click(".vrow[data-workload=\"demo/default/web\"] a");
        }
        first = false;
        let cli = run(&["explain", "deploy/web", "--workspace", "demo"]);
        let page = wait_for("an explanation on the page", DEADLINE, || match b.text("#detail-explain") {
            Some(t) if t.starts_with("deploy/web") => Ok(t),
            seen => Err(format!("{seen:?}")),
        });
        if cli.ok && page.trim() == cli.stdout.trim() {
            Ok(page)
        } else {
            Err(format!("page:\n{page}\ncli:\n{cli:?}"))
        }
    });
    assert!(why.lines().any(|l| l.starts_with("west ") && l.contains("NotReady")), "{why}");
    assert_accessible(&mut b, "a workload's page");
    let companions = b.texts("#detail-companions tr");
    for want in ["Service/webAvailable", "Ingress/webAvailable", "PodDisruptionBudget/webAvailable"] {
        assert!(companions.iter().any(|r| r.starts_with(want)), "{want}: {companions:?}");
    }
    let service = b.text("#detail-companions tr[data-companion=\"Service/web\"]").unwrap_or_default();
    assert!(!service.contains("west") && service.matches("172.18.").count() == 2, "{service}");
    let per_cluster = b.texts("#detail-clusters tr");
    assert!(per_cluster.iter().any(|r| r.starts_with("east")), "{per_cluster:?}");
    assert!(b.texts("#detail-conditions tr").iter().any(|r| r.starts_with("Scheduled")), "{:?}", b.texts("#detail-conditions tr"));
    let drilled = drill.wait_with_output().unwrap();
    assert!(drilled.status.success(), "flotilla drill kill west: {}", String::from_utf8_lossy(&drilled.stderr));

    // Back to the fleet: west returns and is cordoned, and the row says so.
    b.click("#detail a[href=\"#\"]");
    let o = run(&["drill", "restore", "west"]);
    assert!(o.ok, "flotilla drill restore west: {o:?}");
    wait_cluster(&mut b, "west", "True", DEADLINE);
    let o = run(&["cluster", "cordon", "west"]);
    assert!(o.ok, "flotilla cluster cordon west: {o:?}");
    wait_for("west Cordoned on the page", DEADLINE, || match b.texts("#cluster-rows tr[data-cluster=\"west\"] td").get(6) {
        Some(s) if s == "Cordoned" => Ok(()),
        seen => Err(format!("{seen:?}")),
    });
    // Two of three clusters lost at once: the disruption brake holds their workloads,
    // and the page says so in a banner that names them.
    let o = run(&["drill", "kill", "east,eu"]);
    assert!(o.ok && o.stdout.contains("failover paused"), "flotilla drill kill east,eu: {o:?}");
    let banner = wait_for("the brake's banner", DEADLINE, || match b.text("#brake") {
        Some(t) if b.visible("#brake") && t.contains("east") && t.contains("eu") => Ok(t),
        seen => Err(format!("{seen:?}; rows: {:?}", b.texts("#cluster-rows tr"))),
    });
    assert!(banner.contains("FAILOVER PAUSED") && banner.contains("confirm-lost"), "{banner}");
    assert_eq!(shown_clusters(&mut b, "demo/default/web").as_deref(), Some(moved.as_str()), "the brake let web move");
    assert_eq!(b.eval("window.flotillaTestMark").as_str(), Some("kept"), "the page was reloaded");
    assert_eq!(unexpected_errors(&mut b), Vec::<String>::new());
    drop(up);
    // Stopping up stopped every cluster of its fleet, west that the drill restored too.
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&data_s) && c.contains("sim-cluster"))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "clusters of the fleet still run");
}

#[test]
fn a_workspace_session_sees_only_its_workspace_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut b) = Browser::launch(&dir.path().join("browser.log")) else { return };
    let f = Flotilla::start();
    for ws in ["team-a", "team-b"] {
        let o = f.flotilla(&["workspace", "create", ws]);
        assert!(o.ok, "workspace create {ws}: {o:?}");
        let o = f.kubectl_stdin(&["--context", ws, "apply", "-f", "-"], &deployment(&format!("{ws}-app")).cpu("100m").manifest());
        assert!(o.ok, "apply in {ws}: {o:?}");
    }
    let token = f.k(&["config", "view", "--raw", "-o", "jsonpath={.users[?(@.name==\"workspace-team-a\")].user.token}"]);
    assert!(token.starts_with("fws1.team-a."), "{token}");
    let url = format!("{}/dashboard/", f.url.trim_end_matches('/'));

    // With team-a's own token: team-a's workload, and no fleet.
    b.goto(&url);
    b.fill("#token", token.trim());
    b.click("#sign-in-form button");
    wait_for("team-a's workload", DEADLINE, || match shown_clusters(&mut b, "team-a/default/team-a-app") {
        Some(_) => Ok(()),
        None => Err(format!("{:?} {:?}", b.texts(".vrow:not([hidden])"), b.text("#sign-in-error"))),
    });
    assert_eq!(b.text("#scope").as_deref(), Some("workspace team-a"));
    assert_eq!(b.count(".vrow:not([hidden])"), 1, "{:?}", b.texts(".vrow:not([hidden])"));
    assert!(b.visible("#clusters-hidden") && !b.visible("#cluster-table"));
    // A workload created while the page is open appears in the list, and goes with its
    // deletion.
    let o = f.kubectl_stdin(&["--context", "team-a", "apply", "-f", "-"], &deployment("late").cpu("100m").manifest());
    assert!(o.ok, "apply late: {o:?}");
    wait_for("the new workload on the page", DEADLINE, || match b.text("#workload-count") {
        Some(t) if t == "(2)" && shown_clusters(&mut b, "team-a/default/late").is_some() => Ok(()),
        seen => Err(format!("{seen:?} {:?}", b.texts(".vrow:not([hidden])"))),
    });
    let o = f.kubectl(&["--context", "team-a", "delete", "deploy", "late"]);
    assert!(o.ok, "delete late: {o:?}");
    wait_for("the deleted workload gone from the page", DEADLINE, || match b.text("#workload-count") {
        Some(t) if t == "(1)" && shown_clusters(&mut b, "team-a/default/late").is_none() => Ok(()),
        seen => Err(format!("{seen:?} {:?}", b.texts(".vrow:not([hidden])"))),
    });
    // The session the page holds reads only: a write with it is refused by the server.
    let write = b.eval(
        r#"(async () => {
            const s = JSON.parse(sessionStorage.getItem("flotilla.dashboard.session"));
            const r = await fetch("/clusters/team-a/api/v1/namespaces/default/configmaps", {method: "POST",
                headers: {Authorization: `Bearer ${s.token}`, "Content-Type": "application/json"},
                body: JSON.stringify({metadata: {name: "x"}})});
            const other = await fetch("/clusters/team-b/apis/apps/v1/deployments", {headers: {Authorization: `Bearer ${s.token}`}});
            const secrets = await fetch("/clusters/team-a/api/v1/secrets", {headers: {Authorization: `Bearer ${s.token}`}});
            return [s.workspace, r.status, other.status, secrets.status];
        })()"#,
    );
    assert_eq!(write, serde_json::json!(["team-a", 403, 403, 403]));
    // The page renews its session as it would halfway through its life: the new one
    // works, and keeps the limit of renewals that the sign-in set.
    let renewed = b.eval(
        r#"(async () => {
            const s = JSON.parse(sessionStorage.getItem("flotilla.dashboard.session"));
            const r = await fetch("/clusters/team-a/dashboard/session", {method: "POST", headers: {Authorization: `Bearer ${s.token}`}});
            const next = (await r.json()).status.token;
            const read = await fetch("/clusters/team-a/apis/apps/v1/deployments", {headers: {Authorization: `Bearer ${next}`}});
            return [r.status, read.status, next.split(".")[3] === s.token.split(".")[3]];
        })()"#,
    );
    assert_eq!(renewed, serde_json::json!([201, 200, true]));
    // Those refusals were the point; the browser logs each.
    let refusals = b.errors();
    assert_eq!(refusals.iter().filter(|e| e.contains("status of 403")).count(), 3, "{refusals:?}");
    b.click("#sign-out");
    wait_for("the sign-in form again", DEADLINE, || if b.visible("#sign-in") { Ok(()) } else { Err("board".into()) });

    // A link for team-b, minted with the admin kubeconfig, signs in to team-b only.
    let run = |args: &[&str]| f.flotilla(args);
    let (_, link) = dashboard_link(&run, &["--workspace", "team-b"]);
    b.goto(&link);
    wait_for("team-b's workload", DEADLINE, || match shown_clusters(&mut b, "team-b/default/team-b-app") {
        Some(_) => Ok(()),
        None => Err(format!("{:?} {:?}", b.texts(".vrow:not([hidden])"), b.text("#sign-in-error"))),
    });
    assert_eq!(b.count(".vrow:not([hidden])"), 1, "{:?}", b.texts(".vrow:not([hidden])"));
    // With a kubeconfig that holds only team-a's context, as a tenant would have, the
    // link covers team-a.
    let tenant = f.data_dir().join("team-a.kubeconfig");
    let minified = f.k(&["config", "view", "--raw", "--minify", "--context", "team-a"]);
    std::fs::write(&tenant, minified).unwrap();
    let o = f.flotilla(&["--kubeconfig", tenant.to_str().unwrap(), "dashboard", "--no-open"]);
    assert!(o.ok && o.stdout.contains("sign-in link for workspace team-a") && o.stdout.contains("#signin=fdl1.team-a."), "{o:?}");
    // A link is for opening a session only: used as a bearer token it reads nothing.
    let fragment = link.split_once("#signin=").unwrap().1;
    let o = f.kubectl(&["--token", fragment, "get", "--raw", "/clusters/team-b/apis/apps/v1/deployments"]);
    assert!(!o.ok && o.stderr.contains("Forbidden"), "{o:?}");
    assert_eq!(unexpected_errors(&mut b), Vec::<String>::new());
}

#[test]
fn the_page_draws_only_the_rows_in_view_and_shows_hostile_text_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut b) = Browser::launch(&dir.path().join("browser.log")) else { return };
    let f = Flotilla::start();
    let o = f.flotilla(&["workspace", "create", "team-a"]);
    assert!(o.ok, "workspace create: {o:?}");
    let many: Vec<String> = (0..150).map(|i| deployment(&format!("app-{i:03}")).cpu("100m").manifest()).collect();
    let o = f.kubectl_stdin(&["--context", "team-a", "apply", "-f", "-"], &many.join("\n---\n"));
    assert!(o.ok, "apply: {o:?}");
    // A message with markup in it, as any client that may create Events can write.
    let hostile = r#"<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>"#;
    let event = format!(
        "apiVersion: v1\nkind: Event\nmetadata: {{name: hostile, namespace: default}}\ninvolvedObject: {{apiVersion: apps/v1, kind: Deployment, namespace: default, name: app-000}}\nreason: Rescheduled\ntype: Normal\nmessage: '{hostile}'\n"
    );
    let o = f.kubectl_stdin(&["--context", "team-a", "create", "-f", "-"], &event);
    assert!(o.ok, "create the Event: {o:?}");

    let admin = std::fs::read_to_string(f.data_dir().join("admin.token")).unwrap();
    b.goto(&format!("{}/dashboard/", f.url.trim_end_matches('/')));
    b.fill("#token", admin.trim());
    b.click("#sign-in-form button");
    wait_for("150 workloads counted", DEADLINE, || match b.text("#workload-count") {
        Some(t) if t == "(150)" => Ok(()),
        seen => Err(format!("{seen:?} {:?}", b.text("#sign-in-error"))),
    });
    // Only the rows in view (and a few around them) are in the page.
    let rows = b.count(".vrow");
    assert!((5..=60).contains(&rows), "{rows} row elements for 150 workloads");
    assert!(shown_clusters(&mut b, "team-a/default/app-149").is_none(), "the last row is drawn before it is in view");
    b.eval("const l = document.getElementById('workload-list'); l.scrollTop = l.scrollHeight; true");
    wait_for("the last row in view", DEADLINE, || match shown_clusters(&mut b, "team-a/default/app-149") {
        Some(_) => Ok(()),
        None => Err(format!("{:?}", b.texts(".vrow:not([hidden]) a"))),
    });
    assert_eq!(b.count(".vrow"), rows, "scrolling made new row elements");
    b.fill("#filter", "app-14");
    wait_for("the filter", DEADLINE, || match b.text("#workload-count") {
        Some(t) if t == "(10 of 150)" => Ok(()),
        seen => Err(format!("{seen:?}")),
    });

    // The message shows as the text it is: no element is made of it, nothing runs.
    let item = wait_for("the hostile Event in the timeline", DEADLINE, || {
        match b.texts("#timeline-list li").into_iter().find(|t| t.contains("Rescheduled team-a/default/app-000")) {
            Some(t) => Ok(t),
            None => Err(format!("{:?}", b.texts("#timeline-list li"))),
        }
    });
    assert!(item.contains(hostile), "{item}");
    assert_eq!(b.count("#timeline-list img, #timeline-list script"), 0);
    assert_eq!(b.eval("window.pwned === undefined"), serde_json::json!(true));
    assert_eq!(unexpected_errors(&mut b), Vec::<String>::new());
}
