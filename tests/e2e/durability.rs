//! No acknowledged write is lost: kill -9 the server while kubectl writes, restart
//! it, and every write kubectl reported as done is still there.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{wait_for, Flotilla};

#[test]
fn kill_9_during_writes_loses_no_acknowledged_write() {
    let mut f = Flotilla::start();
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let kubeconfig = f.kubeconfig();
    let cache = f.dir.path().join("kubecache");
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (acked, stop, kubeconfig, cache) = (acked.clone(), stop.clone(), kubeconfig.clone(), cache.clone());
            std::thread::spawn(move || {
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let name = format!("w{w}-{i}");
                    let out = std::process::Command::new("kubectl")
                        .env("KUBECONFIG", &kubeconfig)
                        .arg("--cache-dir")
                        .arg(&cache)
                        .args(["create", "--raw", "/api/v1/namespaces/default/configmaps", "-f", "-"])
                        .stdin(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .and_then(|mut c| {
                            use std::io::Write;
                            c.stdin.take().unwrap().write_all(format!("{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"{name}\"}},\"data\":{{\"i\":\"{i}\"}}}}").as_bytes())?;
                            c.wait_with_output()
                        });
                    if matches!(out, Ok(ref o) if o.status.success()) {
                        acked.lock().unwrap().push(name);
                    }
                }
            })
        })
        .collect();
    wait_for("some writes to be acknowledged", Duration::from_secs(20), || {
        let n = acked.lock().unwrap().len();
        if n >= 40 {
            Ok(())
        } else {
            Err(format!("{n} acknowledged"))
        }
    });
    f.kill9();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    f.launch();
    let stored = f.k(&["get", "cm", "-o", "name"]);
    let missing: Vec<&String> = acked.iter().filter(|n| !stored.lines().any(|l| l == format!("configmap/{n}"))).collect();
    assert!(missing.is_empty(), "{} of {} acknowledged writes lost after kill -9: {missing:?}", missing.len(), acked.len());
}
