//! RFC 3986 percent-decoding, for the parts of walrelay's URLs that carry
//! text a person wrote: `--pg-url`'s query (`sslrootcert`) and the user and
//! password of `--alert-webhook`. An escape that is not two hex digits is
//! kept as written. And the password of a URL's user info, a secret to mask;
//! and encoding, for the query values of a signed AWS token.

/// Encodes every byte but RFC 3986's unreserved characters (letters, digits,
/// `-._~`), as SigV4 and botocore encode query values.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes; never fails, never panics.
pub fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The password in a URL's user info (scheme://user:password@host/…), as written.
pub fn url_password(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then(|| password.to_string())
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn encoding_keeps_only_unreserved_characters_and_decodes_back() {
        let text = "app user/ü:1~a";
        assert_eq!(super::encode(text), "app%20user%2F%C3%BC%3A1~a");
        assert_eq!(decode(&super::encode(text)), text);
    }

    #[test]
    fn escapes_are_decoded_and_anything_else_is_kept() {
        assert_eq!(decode("p%40ss%2Fword"), "p@ss/word");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz%4"), "%zz%4");
        // A multi-byte character right after '%' is not cut in half.
        assert_eq!(decode("%aé"), "%aé");
    }
}
