package io.kvpool.examples.http;

import io.netty.buffer.ByteBuf;
import io.netty.handler.codec.http.HttpDecoderConfig;
import io.netty.handler.codec.http.HttpRequestDecoder;

/**
 * Netty's request decoder, telling {@link Connection} whether it holds bytes of a request not yet decoded: the
 * start of the next head may come in the same read as the end of the request before it, and its header timer must
 * start then. On the connection's event loop only.
 */
final class RequestDecoder extends HttpRequestDecoder {

    RequestDecoder(HttpDecoderConfig config) {
        super(config);
    }

    /**
     * {@return whether bytes other than blank lines wait undecoded} Asked when a request's last content is read:
     * Netty hands on each decoded message before it decodes the bytes after it, so what waits then is the next
     * request's. Blank lines between requests are not a request (RFC 9112 §2.2): like Netty's decoder (strict line
     * parsing, its default), this skips CR and LF before a request line and nothing else; the decoder refuses another
     * control character there with 400, and takes a space as the start of the line.
     */
    boolean holdsRequestBytes() {
        return startsRequest(internalBuffer());
    }

    /** {@return whether {@code b}'s readable bytes hold more than the CRs and LFs the decoder skips before a request line} */
    static boolean startsRequest(ByteBuf b) {
        for (int i = b.readerIndex(); i < b.writerIndex(); i++) {
            final byte c = b.getByte(i);
            if (c != '\r' && c != '\n') {
                return true;
            }
        }
        return false;
    }

    /**
     * {@return the request target in origin form (path and query)} An absolute-form target ({@code http://host/a?b}),
     * which a server must accept (RFC 9112 §3.2.2), becomes {@code /a?b}; any other, and an http(s) one without a host,
     * is returned as it is.
     */
    static String originForm(String target) {
        final int scheme = target.indexOf("://");
        final boolean http = scheme == 4 && target.regionMatches(true, 0, "http", 0, 4)
            || scheme == 5 && target.regionMatches(true, 0, "https", 0, 5);
        if (!http || target.length() == scheme + 3 || "/?".indexOf(target.charAt(scheme + 3)) >= 0) {
            return target; // not http(s), or no host (RFC 9110 §4.2.1: invalid): left for the handler to refuse
        }
        final int path = target.indexOf('/', scheme + 3);
        final int query = target.indexOf('?', scheme + 3);
        if (path < 0 || (query >= 0 && query < path)) {
            return query < 0 ? "/" : "/" + target.substring(query);
        }
        return target.substring(path);
    }
}
