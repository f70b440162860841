//! Finding the applications of a `rodeo run --processes` partition from outside, as an
//! operator would (`/proc/<pid>/cmdline`), to kill or pause one in a fault test.

/// A live (not zombie) `rodeo app` process: its pid and its `--name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// Process id.
    pub pid: i32,
    /// The application's name (`--name`), e.g. `ros-1`.
    pub name: String,
}

/// Every live `rodeo app` process whose command line mentions `marker` (a partition's output
/// directory is a good marker: each test has its own).
pub fn apps_of(marker: &str) -> Vec<App> {
    scan(|args, _| args.iter().any(|a| a.contains(marker)))
}

/// Every live `rodeo app` process started by the process `parent` (a `rodeo serve`, whose
/// applications' command lines name no output directory).
pub fn apps_under(parent: u32) -> Vec<App> {
    scan(|_, ppid| u32::try_from(ppid).is_ok_and(|p| p == parent))
}

/// The live `rodeo app` processes whose command line and parent pid pass `keep`.
fn scan(keep: impl Fn(&[String], i32) -> bool) -> Vec<App> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        // `stat` is "pid (comm) state ppid ...": the fields after the last ')'.
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let mut after = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        let state = after.next();
        let ppid = after.next().and_then(|p| p.parse().ok()).unwrap_or(-1);
        if !(args.iter().any(|a| a == "app") && keep(&args, ppid)) {
            continue;
        }
        // A zombie has ended; only its parent would reap it.
        if matches!(state, Some("Z") | Some("X") | None) {
            continue;
        }
        let name = args
            .iter()
            .position(|a| a == "--name")
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_default();
        found.push(App { pid, name });
    }
    found
}

/// The pid of the live `rodeo app` named `name` whose command line mentions `marker`.
pub fn find_app(name: &str, marker: &str) -> Option<i32> {
    apps_of(marker)
        .into_iter()
        .find(|a| a.name == name)
        .map(|a| a.pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nothing_for_a_marker_no_process_has() {
        assert!(apps_of("no-process-mentions-this-7f3a9c").is_empty());
        assert_eq!(find_app("ros-1", "no-process-mentions-this-7f3a9c"), None);
    }

    #[test]
    fn a_process_without_rodeo_apps_has_none_under_it() {
        assert!(apps_under(std::process::id()).is_empty());
    }
}
