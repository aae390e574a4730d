//! What a folder tree holds, name by name: the decoy check of the hostile-folder tests
//! and of the `folder_tree` fuzz target (which includes this file by path), so both
//! judge "nothing outside the buffer changed" the same way. Standard library only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every name below `root` with what it is and holds: links by target, files by bytes.
pub fn fingerprint(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read folder").flatten() {
            let p = e.path();
            let t = e.file_type().expect("file type");
            let what = if t.is_symlink() {
                format!("link {:?}", std::fs::read_link(&p).expect("read link"))
            } else if t.is_dir() {
                stack.push(p.clone());
                "dir".into()
            } else if t.is_file() {
                format!("file {:x?}", std::fs::read(&p).expect("read file"))
            } else {
                "special".into()
            };
            out.insert(p, what);
        }
    }
    out
}
