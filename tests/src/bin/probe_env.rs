//! Fixture: reports facts about its own process to the file given as first argument
//! (one `key=value` line each, appended): the address of a stack variable (ASLR), the CPUs
//! it may run on, the environment, whether stdin is /dev/null, its open descriptors and
//! what they are (`fd.N=target`), its limit on open files (`nofile=SOFT,HARD`), and the
//! in-memory files it has mapped (`memfd=NAME`, one line per distinct name, sorted).
use std::io::Write;

fn main() {
    let path = std::env::args().nth(1).expect("usage: probe_env FILE");
    let local = 0u8;
    let mut cpus = Vec::new();
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for this process.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            for c in 0..libc::CPU_SETSIZE as usize {
                if libc::CPU_ISSET(c, &set) {
                    cpus.push(c.to_string());
                }
            }
        }
    }
    let stdin = std::fs::read_link("/proc/self/fd/0").unwrap_or_default();
    let mut out = String::new();
    out.push_str(&format!("stack={:p}\n", &local));
    out.push_str(&format!("cpus={}\n", cpus.join(",")));
    out.push_str(&format!("stdin={}\n", stdin.display()));
    let mut env: Vec<String> = std::env::vars()
        .map(|(k, v)| format!("env.{k}={v}"))
        .collect();
    env.sort();
    for e in env {
        out.push_str(&e);
        out.push('\n');
    }
    // The descriptor that reads the directory shows as `/proc/<pid>/fd`: left out.
    let mut fds: Vec<(u32, String)> = std::fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .filter_map(|e| {
            let e = e.ok()?;
            let fd = e.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(e.path()).ok()?.display().to_string();
            let listing = target.starts_with("/proc/") && target.ends_with("/fd");
            (!listing).then_some((fd, target))
        })
        .collect();
    fds.sort();
    for (fd, target) in fds {
        out.push_str(&format!("fd.{fd}={target}\n"));
    }
    // SAFETY: getrlimit fills the plain struct it is given.
    let nofile = unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit
    };
    out.push_str(&format!("nofile={},{}\n", nofile.rlim_cur, nofile.rlim_max));
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut memfds: Vec<&str> = maps
        .lines()
        .filter_map(|l| l.split_once("/memfd:").map(|(_, name)| name))
        .collect();
    memfds.sort_unstable();
    memfds.dedup();
    for name in memfds {
        out.push_str(&format!("memfd={name}\n"));
    }
    out.push_str("end\n");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open");
    f.write_all(out.as_bytes()).expect("write");
}
