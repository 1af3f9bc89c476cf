//! Print the inlined instances of a pattern with their entry points:
//! `cargo run -p sbs-probes --example inlined_entries -- BINARY PATTERN`.
use sbs_probes::dwarf::inlined_instances;
use sbs_probes::elf::Image;
use sbs_probes::entries::entries;
use sbs_probes::pattern::Pattern;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(bin), Some(pat)) = (args.next(), args.next()) else {
        return Err("usage: inlined_entries BINARY PATTERN".into());
    };
    let image = Image::load(std::path::Path::new(&bin))?;
    let pattern = Pattern::parse(&pat)?;
    for inst in inlined_instances(image.data(), &pattern)? {
        let e = entries(&image, &inst.ranges);
        let ranges: Vec<String> = inst
            .ranges
            .iter()
            .map(|(b, e)| format!("{b:#x}..{e:#x}"))
            .collect();
        let points: Vec<String> = e
            .points
            .iter()
            .map(|p| format!("{:#x}", p.address))
            .collect();
        let split = match &inst.split_from {
            None => String::new(),
            Some(from) => format!(" SPLIT PART of {from:?}"),
        };
        println!(
            "{} at {} in {}: ranges [{}] entries [{}]{}{split}",
            inst.demangled,
            inst.call_site.as_deref().unwrap_or("?"),
            e.caller,
            ranges.join(" "),
            points.join(" "),
            e.uncertain
                .map(|u| format!(" UNCERTAIN: {u}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}
