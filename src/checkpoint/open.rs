//! Opening a checkpoint directory: the shard set from `model.safetensors.index.json` (cross-
//! checked against the shard headers) or from every `*.safetensors` file (FORMATS.md §3).

use super::*;

fn load_shard(b: &mut IndexBuilder, file_name: &str, path: PathBuf) -> Result<usize> {
    let raw = safetensors::read_header(&path)?;
    let label = path.display().to_string();
    let header = safetensors::parse_header(&label, &raw.bytes, raw.file_size)?;
    b.add_shard(file_name, path, raw.file_size, &header)
}

pub(super) fn open_without_index_file(dir: &Path) -> Result<TensorIndex> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| Error::invalid(format!("{}: cannot list directory: {e}", dir.display())))?;
    let mut files: Vec<(Vec<u8>, String, PathBuf)> = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| {
            Error::invalid(format!("{}: cannot list directory: {e}", dir.display()))
        })?;
        let os = ent.file_name();
        let bytes = os.as_encoded_bytes().to_vec();
        if !bytes.ends_with(b".safetensors") {
            continue;
        }
        let path = ent.path();
        // Regular files, following symlinks (hub caches link shards to blobs).
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => {}
            _ => continue,
        }
        files.push((bytes, os.to_string_lossy().into_owned(), path));
    }
    if files.is_empty() {
        return Err(Error::invalid(format!(
            "{}: no {INDEX_FILE} and no *.safetensors files (not a checkpoint directory?)",
            dir.display()
        )));
    }
    // Directory entries: the names are distinct.
    crate::sort::sort_by(&mut files, |a, b| a.0.cmp(&b.0));
    let mut b = IndexBuilder::new(dir);
    for (_, name, path) in files {
        load_shard(&mut b, &name, path)?;
    }
    Ok(b.finish())
}

fn valid_shard_file_name(s: &str) -> bool {
    !s.contains('/')
        && !s.contains('\\')
        && !s.contains("..")
        && !s.contains('\0')
        && s.ends_with(".safetensors")
}

/// The index file's `weight_map`: (tensor name, shard id, byte offset of the name) in file
/// order, names borrowed from the file's bytes where possible; shard ids index `shard_names`.
struct WeightMap<'b> {
    map: Vec<(Cow<'b, str>, u32, usize)>,
    shard_names: Vec<String>,
}

/// Parses the index file `bytes` (named `label`; FORMATS.md §3): a JSON object with a
/// `weight_map` of plain shard file names and an optional `metadata` object. Errors (exit 2)
/// name the file, the byte and the member.
fn parse_weight_map<'b>(label: &str, bytes: &'b [u8]) -> Result<WeightMap<'b>> {
    let jerr = |e: crate::json::JsonError| e.into_error(label, 0);
    let mut sc = Scanner::new(bytes).map_err(jerr)?;
    if sc.peek().map_err(jerr)? != Kind::Object {
        return Err(Error::invalid(format!(
            "{label}: expected a JSON object with a weight_map (docs/formats.md#the-shard-index)"
        )));
    }
    // weight_map entries, borrowed from `bytes` where possible; shard names interned.
    let mut map: Vec<(Cow<'_, str>, u32, usize)> = Vec::new();
    let mut shard_names: Vec<String> = Vec::new();
    let mut shard_ids: HashMap<String, u32> = HashMap::new();
    let mut seen_weight_map = false;
    let mut seen_top: Vec<String> = Vec::new();
    sc.begin_object().map_err(jerr)?;
    while let Some(key) = sc.next_key().map_err(jerr)? {
        if seen_top.iter().any(|k| *k == key) {
            return Err(Error::invalid(format!(
                "{label}: byte {}: duplicate member \"{key}\"",
                sc.key_offset()
            )));
        }
        seen_top.push(key.to_string());
        match key.as_ref() {
            "weight_map" => {
                seen_weight_map = true;
                let off = sc.offset();
                if sc.peek().map_err(jerr)? != Kind::Object {
                    return Err(Error::invalid(format!(
                        "{label}: byte {off}: weight_map must be an object (tensor name → shard file name)"
                    )));
                }
                sc.begin_object().map_err(jerr)?;
                while let Some(name) = sc.next_key().map_err(jerr)? {
                    let name_at = sc.key_offset();
                    let voff = sc.offset();
                    if sc.peek().map_err(jerr)? != Kind::String {
                        return Err(Error::invalid(format!(
                            "{label}: byte {voff}: weight_map[\"{name}\"]: expected a shard file name string"
                        )));
                    }
                    let file = sc.string().map_err(jerr)?;
                    if !valid_shard_file_name(&file) {
                        return Err(Error::invalid(format!(
                            "{label}: byte {voff}: weight_map[\"{name}\"]: \"{file}\" is not a plain file name ending in .safetensors (no '/', '\\', '..'; docs/formats.md#the-shard-index)"
                        )));
                    }
                    let id = match shard_ids.get(file.as_ref()) {
                        Some(&id) => id,
                        None => {
                            let id = shard_names.len() as u32;
                            shard_names.push(file.to_string());
                            shard_ids.insert(file.into_owned(), id);
                            id
                        }
                    };
                    map.push((name, id, name_at));
                }
            }
            "metadata" => {
                let off = sc.offset();
                if sc.peek().map_err(jerr)? != Kind::Object {
                    return Err(Error::invalid(format!(
                        "{label}: byte {off}: metadata must be an object"
                    )));
                }
                // Informational (total_size is not checked, FORMATS.md §3); still validated JSON.
                sc.skip_value().map_err(jerr)?;
            }
            _ => sc.skip_value().map_err(jerr)?,
        }
    }
    sc.finish().map_err(jerr)?;
    if !seen_weight_map {
        return Err(Error::invalid(format!(
            "{label}: missing the required weight_map object (docs/formats.md#the-shard-index)"
        )));
    }
    Ok(WeightMap { map, shard_names })
}

/// Every mapping of the index file (`label`) to a present shard agrees with that shard's
/// header (`final_id`: map shard id → shard index, `usize::MAX` when absent), and every tensor
/// of a present shard is mapped once (FORMATS.md §3). Errors (exit 2) name the file, the byte,
/// the tensor and both shards.
fn cross_check(
    b: &IndexBuilder,
    label: &str,
    dir: &Path,
    map: &[(Cow<'_, str>, u32, usize)],
    shard_names: &[String],
    final_id: &[usize],
) -> Result<()> {
    let present = b.idx.present;
    let mut mapped = vec![false; present];
    for (name, s, name_at) in map {
        let fid = final_id[*s as usize];
        if fid == usize::MAX {
            continue;
        }
        match b.idx.find_entry(name) {
            Some(i) if b.idx.entries[i].shard as usize == fid => {
                if mapped[i] {
                    return Err(Error::invalid(format!(
                        "{label}: byte {name_at}: duplicate weight_map entry \"{name}\""
                    )));
                }
                mapped[i] = true;
            }
            Some(i) => {
                let actual = &b.idx.shards[b.idx.entries[i].shard as usize];
                return Err(Error::invalid(format!(
                    "{label}: byte {name_at}: maps tensor \"{name}\" to shard {}, but the tensor is in shard {} (docs/formats.md#the-shard-index)",
                    shard_names[*s as usize], actual.file_name
                )));
            }
            None => {
                return Err(Error::invalid(format!(
                    "{label}: byte {name_at}: maps tensor \"{name}\" to shard {}, but that shard's header does not contain it (docs/formats.md#the-shard-index)",
                    shard_names[*s as usize]
                )));
            }
        }
    }
    if let Some(i) = mapped.iter().position(|m| !m) {
        let shard = &b.idx.shards[b.idx.entries[i].shard as usize];
        let tensor = b.idx.name(i);
        // Listed, but under a shard file that does not exist: say so, not "not listed".
        if let Some((_, s, name_at)) = map.iter().find(|(n, _, _)| **n == *tensor) {
            return Err(Error::invalid(format!(
                "{label}: byte {name_at}: maps tensor \"{tensor}\" to shard {}, which does not exist in {}; the tensor is in shard {} (docs/formats.md#the-shard-index: index and shards must agree)",
                shard_names[*s as usize],
                dir.display(),
                shard.file_name
            )));
        }
        return Err(Error::invalid(format!(
            "{}: tensor \"{}\" is not listed in {INDEX_FILE}'s weight_map (docs/formats.md#the-shard-index: index and shards must agree)",
            shard.path.display(),
            b.idx.name(i)
        )));
    }
    Ok(())
}

pub(super) fn open_with_index_file(dir: &Path, index_path: &Path) -> Result<TensorIndex> {
    let label = index_path.display().to_string();
    let bytes = std::fs::read(index_path)
        .map_err(|e| Error::invalid(format!("{label}: cannot read: {e}")))?;
    let WeightMap { map, shard_names } = parse_weight_map(&label, &bytes)?;

    // Shards in byte-wise file-name order.
    let mut order: Vec<u32> = (0..shard_names.len() as u32).collect();
    // Interned: the names are distinct.
    crate::sort::sort_by(&mut order, |&a, &b| {
        shard_names[a as usize]
            .as_bytes()
            .cmp(shard_names[b as usize].as_bytes())
    });
    let mut b = IndexBuilder::new(dir);
    b.idx.has_index_file = true;
    // map-shard-id → final shard index (present ones first, in order; absent ones after).
    let mut final_id: Vec<usize> = vec![usize::MAX; shard_names.len()];
    let mut absent: Vec<u32> = Vec::new();
    for &s in &order {
        let name = &shard_names[s as usize];
        let path = dir.join(name);
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => {
                final_id[s as usize] = load_shard(&mut b, name, path)?;
            }
            Ok(_) => {
                return Err(Error::invalid(format!(
                    "{}: listed in {INDEX_FILE} but is not a regular file",
                    path.display()
                )))
            }
            Err(_) => absent.push(s),
        }
    }

    // Cross-check every mapping against the present shards.
    cross_check(&b, &label, dir, &map, &shard_names, &final_id)?;

    // Names mapped to absent shards: kept so that a missing tensor can say where it should be.
    for &s in &absent {
        let name = &shard_names[s as usize];
        final_id[s as usize] = b.add_absent_shard(name, dir.join(name));
    }
    for (name, s, _) in &map {
        let fid = final_id[*s as usize];
        if !b.idx.shards[fid].present {
            b.add_absent_name(name, fid)?;
        }
    }
    Ok(b.finish())
}
