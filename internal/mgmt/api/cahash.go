package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
)

// CAHash is a join token's pin of a CA certificate (its DER): the first 32
// hex digits of its sha256. The station prints it in every join token
// (ID.SECRET.CAHASH); a joining member trusts the station that shows it.
func CAHash(der []byte) string {
	h := sha256.Sum256(der)
	return hex.EncodeToString(h[:16])
}

// CAHashPEM is CAHash of the first certificate in a PEM text, "" when it
// holds none.
func CAHashPEM(p []byte) string {
	for {
		b, rest := pem.Decode(p)
		if b == nil {
			return ""
		}
		if b.Type == "CERTIFICATE" {
			return CAHash(b.Bytes)
		}
		p = rest
	}
}
