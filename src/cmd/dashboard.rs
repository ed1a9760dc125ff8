//! `flotilla dashboard`: the web dashboard's URL and a sign-in link.
//!
//! The link carries a sign-in token (valid for minutes) after `#signin=`: a fragment
//! never leaves the browser, so the token reaches no server log or proxy. The page
//! trades it for a read-only session as soon as it opens, and takes it off the address.

use std::path::Path;

use anyhow::Context;

use crate::cli::DashboardArgs;

pub async fn run(kubeconfig: &Path, args: DashboardArgs) -> anyhow::Result<()> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {} (is the control plane started? pass --kubeconfig or --data-dir)", kubeconfig.display()))?;
    // The admin's `root` context signs in to the whole fleet (or to --workspace); a
    // kubeconfig without one signs in to its current context's workspace.
    let has_root = kc.contexts.iter().any(|c| c.name == "root");
    let context = has_root.then(|| "root".to_string());
    let opts = kube::config::KubeConfigOptions { context, ..Default::default() };
    let mut config = kube::Config::from_custom_kubeconfig(kc, &opts).await.context("the kubeconfig has no usable context")?;
    let origin = origin(&config.cluster_url);
    // A workspace context's URL already ends in its `/clusters/<name>`; the admin's
    // requests are made from the origin, which addresses every workspace.
    let path = match &args.workspace {
        Some(ws) if has_root => format!("/clusters/{ws}/dashboard/link"),
        _ => "/dashboard/link".to_string(),
    };
    if has_root {
        config.cluster_url = origin.parse().context("the control plane's URL")?;
    }
    let client = kube::Client::try_from(config)?;
    let req = http::Request::post(path.as_str()).body(Vec::new())?;
    let resp: serde_json::Value = client.request(req).await.map_err(|e| match e {
        kube::Error::Api(s) => anyhow::anyhow!("minting a dashboard sign-in link: {}", s.message),
        e => anyhow::Error::new(e).context("minting a dashboard sign-in link"),
    })?;
    let status = resp.get("status").context("the sign-in link response has no status")?;
    let token = status.get("token").and_then(serde_json::Value::as_str).context("the sign-in link response has no status.token")?;
    let scope = status.get("workspace").and_then(serde_json::Value::as_str).map(|w| format!("workspace {w}"));
    let url = format!("{origin}/dashboard/");
    let link = format!("{url}#signin={token}");
    println!("dashboard: {url}");
    println!(
        "sign-in link for {} (works for 10 minutes; the page renews its session while it is open):",
        scope.as_deref().unwrap_or("every workspace")
    );
    println!("  {link}");
    println!("the control plane's certificate is signed by its own CA (ca.crt in its data dir): accept it in the browser, or import it");
    if !args.no_open {
        match open_browser(&link) {
            Ok(Some(how)) => println!("opened with {how}"),
            Ok(None) => println!("no browser here (no DISPLAY): open the link above on a machine that reaches {origin}"),
            Err(e) => println!("could not start a browser ({e:#}): open the link above"),
        }
    }
    Ok(())
}

/// `scheme://host:port` of the control plane, without the workspace path.
fn origin(url: &http::Uri) -> String {
    let scheme = url.scheme_str().unwrap_or("https");
    let authority = url.authority().map(|a| a.as_str()).unwrap_or("127.0.0.1:6443");
    format!("{scheme}://{authority}")
}

/// Starts the user's browser on `link`, detached: `$BROWSER`, or the desktop's opener.
/// `None` when there is no graphical session to show it in.
fn open_browser(link: &str) -> anyhow::Result<Option<String>> {
    let graphical = cfg!(target_os = "macos") || std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    let opener = match std::env::var("BROWSER") {
        Ok(b) if !b.trim().is_empty() => b,
        _ if !graphical => return Ok(None),
        _ if cfg!(target_os = "macos") => "open".to_string(),
        _ => "xdg-open".to_string(),
    };
    std::process::Command::new(&opener)
        .arg(link)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("running {opener}"))?;
    Ok(Some(opener))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_drops_the_workspace_path() {
        let url: http::Uri = "https://127.0.0.1:6443/clusters/demo".parse().unwrap();
        assert_eq!(origin(&url), "https://127.0.0.1:6443");
        let url: http::Uri = "https://cp.example.com".parse().unwrap();
        assert_eq!(origin(&url), "https://cp.example.com");
    }
}
