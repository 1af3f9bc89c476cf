//! Fixture: reports facts about its own process to the file given as first argument
//! (one `key=value` line each, appended): the address of a stack variable (ASLR), the CPUs
//! it may run on, the environment, whether stdin is /dev/null.
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
    out.push_str("end\n");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open");
    f.write_all(out.as_bytes()).expect("write");
}
