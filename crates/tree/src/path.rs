//! Znode path rules (`PathUtils.validatePath`): validation for writes, parent and base name.

use warden_proto::ErrorCode;

/// The paths ZooKeeper owns; they can never be deleted.
pub const SPECIAL_PATHS: [&str; 4] = ["/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"];

/// True for `/`, `/zookeeper`, `/zookeeper/quota` and `/zookeeper/config`.
pub fn is_special_path(path: &str) -> bool {
    SPECIAL_PATHS.contains(&path)
}

/// Validates a path as ZooKeeper's `PathUtils.validatePath` does; any failure is `BadArguments`.
///
/// Code points above U+FFFF are rejected too: Java sees them as surrogate pairs, which fall in
/// the forbidden U+D800..U+F8FF range.
pub fn validate_path(path: &str) -> Result<(), ErrorCode> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(ErrorCode::BadArguments);
    }
    if bytes.len() == 1 {
        return Ok(());
    }
    // Printable ASCII needs no decoding (a check without an early exit, which the compiler
    // vectorises); anything else is decoded and checked char by char (controls and DEL included).
    let printable = bytes.iter().fold(true, |ok, &b| ok & (b.wrapping_sub(0x20) < 0x5F));
    if !printable && path.chars().any(is_forbidden_char) {
        return Err(ErrorCode::BadArguments);
    }
    // Segment rules in one pass: no empty segment (`//`, or a trailing `/`), none that is `.`
    // or `..`. A segment of one or two bytes, all dots, is one of those.
    let bad_segment = |len: usize, dots: usize| len == 0 || (len == dots && len <= 2);
    let (mut len, mut dots) = (0, 0);
    for &b in &bytes[1..] {
        if b == b'/' {
            if bad_segment(len, dots) {
                return Err(ErrorCode::BadArguments);
            }
            (len, dots) = (0, 0);
        } else {
            len += 1;
            dots += usize::from(b == b'.');
        }
    }
    if bad_segment(len, dots) {
        return Err(ErrorCode::BadArguments);
    }
    Ok(())
}

fn is_forbidden_char(c: char) -> bool {
    let u = c as u32;
    u <= 0x1F
        || (0x7F..=0x9F).contains(&u)
        || (0xD800..=0xF8FF).contains(&u)
        || (0xFFF0..=0xFFFF).contains(&u)
        || u > 0xFFFF
}

/// The parent of a path: everything before the last `/`, with `""` mapped to `/`.
/// Paths without a `/` (and `/` itself) yield `/`.
pub fn parent(path: &str) -> &str {
    split_last(path).0
}

/// The last segment of a path (after the last `/`); the whole string if there is no `/`.
pub fn basename(path: &str) -> &str {
    split_last(path).1
}

/// [`parent`] and [`basename`] from one scan.
pub fn split_last(path: &str) -> (&str, &str) {
    // A plain backwards scan: a path's last segment is a few bytes long, and `rfind`'s
    // word-at-a-time search costs more to set up than this costs in all (callgrind: a third of
    // the instructions of a node key's order word, computed twice per setData).
    match path.bytes().rposition(|b| b == b'/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("/", path),
    }
}

/// Joins a parent path and a child name.
pub fn join(parent: &str, child: &str) -> String {
    if parent == "/" {
        format!("/{child}")
    } else {
        format!("{parent}/{child}")
    }
}

/// True if `path` is `ancestor` or lies below it (component-wise).
pub fn is_under(path: &str, ancestor: &str) -> bool {
    ancestor == "/"
        || path == ancestor
        || (path.len() > ancestor.len() && path.starts_with(ancestor) && path.as_bytes()[ancestor.len()] == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_paths() {
        for p in ["/", "/a", "/a/b", "/a.b", "/...", "/a/.b", "/zookeeper", "/x/0000000001", "/é"] {
            assert_eq!(validate_path(p), Ok(()), "{p}");
        }
    }

    #[test]
    fn invalid_paths() {
        for p in [
            "",
            "a",
            "a/b",
            "/a/",
            "//",
            "/a//b",
            "/.",
            "/..",
            "/a/./b",
            "/a/../b",
            "/a/.",
            "/a\0b",
            "/a\u{1}",
            "/\u{7f}",
            "/\u{9f}",
            "/\u{d7ff}\u{e000}",
            "/\u{f8ff}",
            "/\u{fff0}",
            "/\u{ffff}",
            "/\u{1F600}",
        ] {
            assert_eq!(validate_path(p), Err(ErrorCode::BadArguments), "{p:?}");
        }
        assert_eq!(validate_path("/\u{d7ff}"), Ok(()));
        assert_eq!(validate_path("/\u{f900}"), Ok(()));
    }

    /// The rules as first written (several passes), kept to check the one-pass version against.
    fn reference(path: &str) -> Result<(), ErrorCode> {
        if !path.starts_with('/') {
            return Err(ErrorCode::BadArguments);
        }
        if path == "/" {
            return Ok(());
        }
        if path.ends_with('/')
            || path.as_bytes()[1..].split(|&c| c == b'/').any(|seg| seg.is_empty() || seg == b"." || seg == b"..")
            || path.chars().any(is_forbidden_char)
        {
            return Err(ErrorCode::BadArguments);
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn one_pass_matches_the_rules(path in "/?[/a.\\x00\\x1f\\x7f\\u{9f}é\\u{d7ff}\\u{e000}\\u{fff0}\\u{1F600}]{0,12}") {
            proptest::prop_assert_eq!(validate_path(&path), reference(&path), "{:?}", path);
        }
    }

    #[test]
    fn parent_and_basename() {
        assert_eq!(parent("/a"), "/");
        assert_eq!(parent("/a/b"), "/a");
        assert_eq!(parent("/a/"), "/a");
        assert_eq!(parent("/"), "/");
        assert_eq!(basename("/a/b"), "b");
        assert_eq!(basename("/"), "");
        assert_eq!(basename("a"), "a");
        assert_eq!(parent("a"), "/");
        assert_eq!(split_last("/a/bc/k0042"), ("/a/bc", "k0042"));
        assert_eq!(split_last("/k"), ("/", "k"));
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
        assert!(is_under("/a/b", "/a"));
        assert!(is_under("/a", "/a"));
        assert!(!is_under("/ab", "/a"));
        assert!(is_under("/ab", "/"));
    }
}
