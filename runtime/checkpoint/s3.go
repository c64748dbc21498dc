package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// S3Storage keeps checkpoints in an S3 bucket (AWS S3 or a compatible
// server: MinIO, SeaweedFS, Ceph RGW, R2) under a prefix, in DirStorage's
// layout with objects for files:
//
//	PREFIX/chk-7/3f9a0c1d-0001-source-0.state   state blobs; the writer's token first
//	PREFIX/chk-7/_committing-3f9a0c1d           only while Commit runs
//	PREFIX/chk-7/_metadata                      written last, If-None-Match: *
//	PREFIX/shared/000012.sst                    shared files (PutFile), multipart when large
//
// A PUT is atomic: an object is either absent or whole, and S3 reads after
// a successful PUT see it. The metadata is put only after every state
// object's PUT returned, so a checkpoint whose metadata exists is whole,
// and a reader never sees a half checkpoint. The metadata's PUT carries
// If-None-Match: * where the server honours it (probed when the storage
// opens, ConditionalWrites), so of two writers of one id only one can
// complete it; each writer names its state objects and its commit marker
// with a random token of its own, so the loser overwrites nothing of the
// winner's and removes only what it wrote.
//
// The commit marker plays DirStorage's _committing: put before the
// metadata and deleted after, it says that a damaged checkpoint beside it
// was never reported complete. A metadata PUT that fails is followed by a
// DELETE of the metadata (the PUT may have succeeded and only its answer
// been lost), so a failed Commit leaves no completed checkpoint (or, when
// that DELETE fails too, a whole one beside its marker); a 412 on
// a retried PUT whose first attempt stored our own bytes is success.
//
// There is no lock: S3 offers no lease that a killed process gives up.
// One job per prefix is the user's to ensure, as with Flink's checkpoint
// directories; conditional writes keep a second writer from overwriting a
// completed checkpoint, but its cleanup may still delete the first one's
// checkpoints in progress and shared files (see DESIGN.md).
type S3Storage struct {
	client   *s3.Client
	uploader *manager.Uploader
	bucket   string
	prefix   string // "" or ending in "/"
	where    string // s3://bucket/prefix, for messages
	cfg      storageConfig
	// endpoint is the endpoint URL the client was configured with, and
	// endpointFrom where it came from; both "" for the SDK's default (AWS)
	// or a client given with WithS3Client. The URL may hold a user,
	// password or query: messages show it through redactEndpoint only.
	endpoint, endpointFrom string

	conditional bool

	mu   sync.Mutex
	open map[int64]bool
	// held are the completed checkpoints retention keeps (Hold).
	held heldIDs

	files *fileBook
	// sizes are the sizes of shared files this instance put or found
	// stored, so that WriteState checks them without a request each.
	sizesMu sync.Mutex
	sizes   map[string]int64
	// filesWritten counts shared files actually uploaded (tests).
	filesWritten atomic.Int64
	// requests counts requests sent (tests, benchmarks).
	requests atomic.Int64
}

var _ Storage = (*S3Storage)(nil)

// s3Config is what S3-specific options set; the other storages ignore it.
type s3Config struct {
	client         *s3.Client
	requestTimeout time.Duration
	minRate        int64
	partSize       int64
	concurrency    int
	maxAttempts    int
	pathStyle      *bool
	inspectOnly    bool
}

func defaultS3Config() s3Config {
	return s3Config{requestTimeout: 30 * time.Second, minRate: 1 << 20, partSize: 16 << 20, concurrency: 4, maxAttempts: 5}
}

// WithS3Client makes S3Storage use client instead of one configured the
// standard way (the AWS environment variables, shared config and
// credentials files, AWS_ENDPOINT_URL). Retries are then the client's.
func WithS3Client(c *s3.Client) StorageOption {
	return storageOptionFunc(func(cfg *storageConfig) { cfg.s3.client = c })
}

// WithS3RequestTimeout bounds each S3 request, retries included (default
// 30s). Transfers of a state object or shared file of n bytes get
// d + n / (1 MiB/s) more: a slower link fails them.
func WithS3RequestTimeout(d time.Duration) StorageOption {
	return storageOptionFunc(func(cfg *storageConfig) { cfg.s3.requestTimeout = d })
}

// WithS3PartSize is the part size of multipart uploads (default 16 MiB;
// S3's minimum is 5 MiB). Shared files larger than one part are uploaded
// in parts, WithS3UploadConcurrency at a time.
func WithS3PartSize(n int64) StorageOption {
	return storageOptionFunc(func(cfg *storageConfig) { cfg.s3.partSize = n })
}

// WithS3UploadConcurrency bounds the parts of one multipart upload in
// flight (default 4). State objects are uploaded as many at a time as the
// runtime writes states (4 per job).
func WithS3UploadConcurrency(n int) StorageOption {
	return storageOptionFunc(func(cfg *storageConfig) { cfg.s3.concurrency = n })
}

// WithS3MaxAttempts is how many times a request is tried (default 5) on
// throttling, 5xx answers and connection errors, with the SDK's
// exponential backoff and jitter between. Ignored with WithS3Client.
func WithS3MaxAttempts(n int) StorageOption {
	return storageOptionFunc(func(cfg *storageConfig) { cfg.s3.maxAttempts = n })
}

// WithS3PathStyle addresses the bucket in the path (http://host/bucket/key)
// rather than the host name. Default: path style when an endpoint is set
// (AWS_ENDPOINT_URL or AWS_ENDPOINT_URL_S3), which S3-compatible servers
// need, virtual-hosted style otherwise. Ignored with WithS3Client.
func WithS3PathStyle() StorageOption {
	return storageOptionFunc(func(cfg *storageConfig) { on := true; cfg.s3.pathStyle = &on })
}

// WithS3VirtualHostedStyle addresses the bucket in the host name
// (http://bucket.host/key) even when an endpoint is set; see
// WithS3PathStyle for the default. Ignored with WithS3Client.
func WithS3VirtualHostedStyle() StorageOption {
	return storageOptionFunc(func(cfg *storageConfig) { off := false; cfg.s3.pathStyle = &off })
}

// withS3InspectOnly opens without the write probe, for tools that only
// look.
func withS3InspectOnly() StorageOption {
	return storageOptionFunc(func(cfg *storageConfig) { cfg.s3.inspectOnly = true })
}

func (c *s3Config) validate() error {
	switch {
	case c.requestTimeout <= 0:
		return fmt.Errorf("checkpoint storage: S3 request timeout is %v; it must be > 0", c.requestTimeout)
	case c.partSize < manager.MinUploadPartSize:
		return fmt.Errorf("checkpoint storage: S3 part size is %d bytes; S3's minimum is %d (5 MiB)", c.partSize, manager.MinUploadPartSize)
	case c.concurrency < 1:
		return fmt.Errorf("checkpoint storage: S3 upload concurrency is %d; it must be >= 1", c.concurrency)
	case c.maxAttempts < 1:
		return fmt.Errorf("checkpoint storage: S3 max attempts is %d; it must be >= 1", c.maxAttempts)
	}
	return nil
}

// IsS3URL reports whether location is an s3:// URL rather than a
// directory.
func IsS3URL(location string) bool { return strings.HasPrefix(location, "s3://") }

// OpenStorage opens the checkpoint storage at location: an S3 storage for
// s3://bucket/prefix, a DirStorage for anything else without a scheme.
func OpenStorage(location string, opts ...StorageOption) (Storage, error) {
	if IsS3URL(location) {
		return NewS3Storage(location, opts...)
	}
	if i := strings.Index(location, "://"); i > 0 {
		return nil, fmt.Errorf("checkpoint storage: %q: unknown scheme %q; give a directory or s3://bucket/prefix", location, location[:i])
	}
	return NewDirStorage(location, opts...)
}

// OpenStorageForInspection opens location as OpenStorage does, without
// writing anything to it (an S3 storage skips its conditional-write probe).
func OpenStorageForInspection(location string, opts ...StorageOption) (Storage, error) {
	return OpenStorage(location, append(opts, withS3InspectOnly())...)
}

// ParseS3URL splits s3://bucket/prefix into the bucket and the key prefix
// ("" or ending in "/").
func ParseS3URL(location string) (bucket, prefix string, err error) {
	u, err := url.Parse(location)
	if err != nil {
		return "", "", fmt.Errorf("checkpoint storage: %q is not a URL: %w", location, err)
	}
	switch {
	case u.Scheme != "s3":
		return "", "", fmt.Errorf("checkpoint storage: %q: scheme %q, want s3://bucket/prefix", location, u.Scheme)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Port() != "":
		return "", "", fmt.Errorf("checkpoint storage: %q: give only s3://bucket/prefix (no user, port, query or fragment; the endpoint is AWS_ENDPOINT_URL)", location)
	case u.Host == "":
		return "", "", fmt.Errorf("checkpoint storage: %q has no bucket; give s3://bucket/prefix", location)
	}
	if err := validateBucket(u.Host); err != nil {
		return "", "", fmt.Errorf("checkpoint storage: %q: %w", location, err)
	}
	prefix = strings.Trim(u.Path, "/")
	if strings.Contains(prefix, "//") {
		return "", "", fmt.Errorf("checkpoint storage: %q: empty path segment in the prefix", location)
	}
	if prefix != "" {
		prefix += "/"
	}
	return u.Host, prefix, nil
}

// validateBucket checks S3's bucket naming rules (3 to 63 characters of
// lower-case letters, digits, '.' and '-', starting and ending with a
// letter or digit).
func validateBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q is %d characters; S3 wants 3 to 63", b, len(b))
	}
	for i, r := range b {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (r != '.' && r != '-' || i == 0 || i == len(b)-1) {
			return fmt.Errorf("bucket name %q: S3 allows lower-case letters, digits, '.' and '-' (not first or last)", b)
		}
	}
	return nil
}

// NewS3Storage opens the checkpoint storage at s3://bucket/prefix. The
// client is configured the standard way of the AWS SDK: credentials and
// region from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_REGION, AWS_PROFILE), the shared config and credentials files, web
// identity (EKS) or the instance role; AWS_ENDPOINT_URL (or
// AWS_ENDPOINT_URL_S3) for an S3-compatible server, with path-style
// addressing then (WithS3PathStyle). Region defaults to us-east-1 when none
// is configured, which S3-compatible servers accept.
//
// It fails at once, with an error saying what to fix, on a bad URL, no
// credentials, an unreachable endpoint or a missing bucket: it lists the
// prefix, and (unless opened for inspection) puts a probe object, lists
// it (a server whose LIST does not show it is refused,
// ErrInconsistentListings), puts it again with If-None-Match: * to learn
// whether the server honours conditional writes (ConditionalWrites), then
// deletes it. Every request is bounded by
// WithS3RequestTimeout.
func NewS3Storage(location string, opts ...StorageOption) (*S3Storage, error) {
	cfg, err := newStorageConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := cfg.s3.validate(); err != nil {
		return nil, err
	}
	bucket, prefix, err := ParseS3URL(location)
	if err != nil {
		return nil, err
	}
	s := &S3Storage{bucket: bucket, prefix: prefix, where: "s3://" + bucket + "/" + prefix, cfg: cfg,
		open: map[int64]bool{}, held: heldIDs{}, files: newFileBook(), sizes: map[string]int64{}}
	s.where = strings.TrimSuffix(s.where, "/")
	client := cfg.s3.client
	if client == nil {
		if client, err = s.newClient(); err != nil {
			return nil, err
		}
	}
	s.client = client
	s.uploader = manager.NewUploader(client, func(u *manager.Uploader) {
		u.PartSize = cfg.s3.partSize
		u.Concurrency = cfg.s3.concurrency
	})
	if err := s.check(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *S3Storage) newClient() (*s3.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.s3.requestTimeout)
	defer cancel()
	attempts := s.cfg.s3.maxAttempts
	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithRetryer(func() aws.Retryer {
		// No retry quota: a checkpoint under a storm of 5xx answers
		// should retry each request, and fail by its timeout, rather than
		// fail at once when the shared bucket of retry tokens is empty.
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = attempts
			o.RateLimiter = ratelimit.None
		})
	}))
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage %s: load the AWS configuration (environment, shared config files): %w", s.where, err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	endpoint, from := os.Getenv("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"
	if endpoint == "" && awsCfg.BaseEndpoint != nil {
		endpoint, from = *awsCfg.BaseEndpoint, "AWS_ENDPOINT_URL or the shared config's endpoint_url"
	}
	if endpoint != "" {
		s.endpoint, s.endpointFrom = endpoint, from
		// The SDK refuses such an endpoint at the first request, quoting
		// it whole; say why here, without the query.
		if u, err := url.Parse(endpoint); err == nil && (u.RawQuery != "" || u.ForceQuery || u.Fragment != "") {
			return nil, fmt.Errorf("checkpoint storage %s: the S3 endpoint %s from %s has a query or fragment (not shown here), which the AWS SDK cannot use: give the scheme, host and port only (credentials go in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a profile)", s.where, redactEndpoint(endpoint), from)
		}
	}
	pathStyle := endpoint != ""
	if p := s.cfg.s3.pathStyle; p != nil {
		pathStyle = *p
	}
	if awsCfg.Credentials == nil {
		return nil, fmt.Errorf("checkpoint storage %s: no AWS credentials provider configured (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with ~/.aws/credentials)", s.where)
	}
	if _, err := awsCfg.Credentials.Retrieve(ctx); err != nil {
		return nil, fmt.Errorf("checkpoint storage %s: no usable AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with ~/.aws/credentials, or run with a web identity or instance role): %w", s.where, err)
	}
	return s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		o.UsePathStyle = pathStyle
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	}), nil
}

// check lists the prefix (credentials, endpoint, bucket) and probes
// conditional writes.
func (s *S3Storage) check() error {
	ctx, cancel := s.reqCtx(0)
	defer cancel()
	s.requests.Add(1)
	_, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix), MaxKeys: aws.Int32(1)})
	if err != nil {
		return fmt.Errorf("checkpoint storage %s: cannot list the bucket (is the bucket there, the endpoint right, %s, and may these credentials list it?): %w", s.where, s.endpointForMessages(), redactEndpointIn(err, s.endpoint))
	}
	if s.cfg.s3.inspectOnly {
		return nil
	}
	probe := s.prefix + "_probe-" + token()
	body := []byte("splitflow conditional write probe")
	if err := s.put(probe, body, true); err != nil {
		return fmt.Errorf("checkpoint storage %s: cannot write (may these credentials put objects?): %w", s.where, redactEndpointIn(err, s.endpoint))
	}
	if err := s.probeListing(probe); err != nil {
		_ = s.deleteKey(probe)
		return err
	}
	err = s.put(probe, body, true)
	switch {
	case err == nil:
		s.conditional = false
		s.cfg.logger.Warn("checkpoint storage: the S3 server ignores If-None-Match: two writers of one checkpoint id cannot be told apart; run one job per prefix",
			slog.String("storage", s.where))
	case isPreconditionFailed(err):
		s.conditional = true
	default:
		_ = s.deleteKey(probe)
		return fmt.Errorf("checkpoint storage %s: conditional write probe: %w", s.where, err)
	}
	if err := s.deleteKey(probe); err != nil {
		return fmt.Errorf("checkpoint storage %s: cannot delete (may these credentials delete objects?): %w", s.where, err)
	}
	return nil
}

// endpointForMessages names the endpoint for an error: where it came
// from and its URL without user, password or query.
func (s *S3Storage) endpointForMessages() string {
	if s.endpoint == "" {
		return "the default AWS endpoint (no AWS_ENDPOINT_URL)"
	}
	return fmt.Sprintf("endpoint %s from %s", redactEndpoint(s.endpoint), s.endpointFrom)
}

// ConditionalWrites reports whether the server honoured If-None-Match: *
// when the storage opened. Without it, Commit's metadata PUT cannot tell
// that another writer completed the same id: the last PUT wins.
func (s *S3Storage) ConditionalWrites() bool { return s.conditional }

// URL returns s3://bucket/prefix.
func (s *S3Storage) URL() string { return s.where }

// Requests returns how many S3 requests the storage sent (retries by the
// SDK not counted separately).
func (s *S3Storage) Requests() int64 { return s.requests.Load() }

func token() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// reqCtx bounds a request moving size bytes.
func (s *S3Storage) reqCtx(size int64) (context.Context, context.CancelFunc) {
	d := s.cfg.s3.requestTimeout + time.Duration(size/s.cfg.s3.minRate)*time.Second
	return context.WithTimeout(context.Background(), d)
}

func (s *S3Storage) url(key string) string { return "s3://" + s.bucket + "/" + key }

func isNotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound")
}

func isPreconditionFailed(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "PreconditionFailed" || ae.ErrorCode() == "ConditionalRequestConflict")
}

// put stores body at key; ifAbsent adds If-None-Match: * when asked.
func (s *S3Storage) put(key string, body []byte, ifAbsent bool) error {
	ctx, cancel := s.reqCtx(int64(len(body)))
	defer cancel()
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))}
	if ifAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	s.requests.Add(1)
	if _, err := s.client.PutObject(ctx, in); err != nil {
		return fmt.Errorf("put %s: %w", s.url(key), err)
	}
	return nil
}

// get reads key whole; a missing key wraps fs.ErrNotExist.
func (s *S3Storage) get(key string, size int64) ([]byte, error) {
	ctx, cancel := s.reqCtx(size)
	defer cancel()
	s.requests.Add(1)
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if isNotFound(err) {
		return nil, fmt.Errorf("%s: %w", s.url(key), fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", s.url(key), err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", s.url(key), err)
	}
	return b, nil
}

// head returns key's size; a missing key wraps fs.ErrNotExist.
func (s *S3Storage) head(key string) (int64, error) {
	ctx, cancel := s.reqCtx(0)
	defer cancel()
	s.requests.Add(1)
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if isNotFound(err) {
		return 0, fmt.Errorf("%s: %w", s.url(key), fs.ErrNotExist)
	}
	if err != nil {
		return 0, fmt.Errorf("head %s: %w", s.url(key), err)
	}
	return aws.ToInt64(out.ContentLength), nil
}

func (s *S3Storage) deleteKey(key string) error {
	ctx, cancel := s.reqCtx(0)
	defer cancel()
	s.requests.Add(1)
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key}); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s: %w", s.url(key), err)
	}
	return nil
}

// deleteKeys deletes keys (relative to the prefix) with DeleteObjects,
// 1000 a request.
func (s *S3Storage) deleteKeys(keys []string) error {
	var errs []error
	for batch := range slices.Chunk(keys, 1000) {
		objs := make([]types.ObjectIdentifier, len(batch))
		for i, k := range batch {
			objs[i] = types.ObjectIdentifier{Key: aws.String(s.prefix + k)}
		}
		ctx, cancel := s.reqCtx(0)
		s.requests.Add(1)
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.bucket, Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)}})
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("delete %d objects under %s: %w", len(batch), s.where, err))
			continue
		}
		for _, e := range out.Errors {
			errs = append(errs, fmt.Errorf("delete %s: %s: %s", s.url(aws.ToString(e.Key)), aws.ToString(e.Code), aws.ToString(e.Message)))
		}
	}
	return errors.Join(errs...)
}

type s3Object struct {
	key  string
	size int64
}

// list returns every object under prefix (relative to the storage's
// prefix), all pages, each page a request under its own timeout.
func (s *S3Storage) list(rel string) ([]s3Object, error) {
	var out []s3Object
	err := s.listPages(rel, "", func(page *s3.ListObjectsV2Output) {
		for _, o := range page.Contents {
			out = append(out, s3Object{key: strings.TrimPrefix(aws.ToString(o.Key), s.prefix), size: aws.ToInt64(o.Size)})
		}
	})
	return out, err
}

// listPages lists under prefix rel (relative to the storage's prefix),
// grouping keys at delimiter when it is not "", and hands every page to
// fn; each page is a request under its own timeout.
func (s *S3Storage) listPages(rel, delimiter string, fn func(*s3.ListObjectsV2Output)) error {
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + rel)}
	if delimiter != "" {
		in.Delimiter = aws.String(delimiter)
	}
	p := s3.NewListObjectsV2Paginator(s.client, in)
	for p.HasMorePages() {
		ctx, cancel := s.reqCtx(0)
		s.requests.Add(1)
		page, err := p.NextPage(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("list %s: %w", s.url(s.prefix+rel), err)
		}
		fn(page)
	}
	return nil
}

func s3StateKey(id int64, name string) string { return chkDir(id) + "/" + name }

const s3MarkerPrefix = committingFile + "-"

// Begin checks that id has no metadata and starts a writer with a token
// of its own. Leftovers of an earlier attempt at id are not removed here:
// their names hold another token, so they are in nobody's way, and they
// may be another writer's work in progress. Retention removes them with
// the checkpoint, or a later commit as an incomplete one.
func (s *S3Storage) Begin(id int64) (Writer, error) {
	if id <= 0 {
		return nil, fmt.Errorf("checkpoint storage: checkpoint id %d; ids start at 1", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[id] {
		return nil, fmt.Errorf("checkpoint storage: checkpoint %d is already being written", id)
	}
	metaKey := s3StateKey(id, metadataFile)
	switch _, err := s.head(s.prefix + metaKey); {
	case err == nil:
		return nil, &CheckpointError{ID: id, File: chkDir(id), Err: ErrExists}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, &CheckpointError{ID: id, File: metaKey, Err: err}
	}
	s.open[id] = true
	s.files.begin(id)
	return &s3Writer{s: s, id: id, token: token(), log: newWriteLog(id)}, nil
}

type s3Writer struct {
	s     *S3Storage
	id    int64
	token string
	log   *writeLog

	mu      sync.Mutex
	written []string // keys put, for cleanup
}

func (w *s3Writer) ID() int64 { return w.id }

func (w *s3Writer) WriteState(owner Owner, data []byte, files ...FileHandle) (StateHandle, error) {
	name, err := w.log.reserve(owner)
	if err != nil {
		return StateHandle{}, err
	}
	sorted, err := w.s.checkFiles(w.id, owner, files)
	if err != nil {
		w.log.release(owner)
		return StateHandle{}, err
	}
	name = w.token + "-" + name
	h := StateHandle{Owner: owner, File: name, Size: int64(len(data)), CRC32C: checksum(data), Files: sorted}
	key := s3StateKey(w.id, name)
	w.mu.Lock()
	w.written = append(w.written, key)
	w.mu.Unlock()
	// Outside any lock: the runtime writes several states at once.
	if err := w.s.put(w.s.prefix+key, data, false); err != nil {
		w.log.release(owner)
		return StateHandle{}, &CheckpointError{ID: w.id, File: key, Err: err}
	}
	w.log.record(h)
	h.Files = slices.Clone(h.Files)
	return h, nil
}

// checkFiles sorts the shared files of owner's state in checkpoint id and
// checks that each is stored with its handle's size: from what this
// instance put, or a HEAD.
func (s *S3Storage) checkFiles(id int64, owner Owner, files []FileHandle) ([]FileHandle, error) {
	sorted, err := sortFiles(files)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d: state of %s: %w", id, owner, err)
	}
	for _, f := range sorted {
		s.sizesMu.Lock()
		size, ok := s.sizes[f.Name]
		s.sizesMu.Unlock()
		if !ok {
			size, err = s.head(s.prefix + sharedPath(f.Name))
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("state of %s uses shared file %s, which is not stored; put it with PutFile first: %w", owner, f.Name, err)}
			case err != nil:
				return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("state of %s uses shared file %s: %w", owner, f.Name, err)}
			}
		}
		if size != f.Size {
			return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("state of %s uses shared file %s of %d bytes, but %s is %d bytes", owner, f.Name, f.Size, s.url(s.prefix+sharedPath(f.Name)), size)}
		}
	}
	return sorted, nil
}

func (w *s3Writer) Commit(m Metadata) error {
	m, err := w.log.commit(m)
	if errors.Is(err, ErrWriterClosed) {
		return err
	}
	// Metadata that does not pass the write log was never put.
	left := removeOwn
	if err == nil {
		left, err = w.persist(m)
	}
	if err != nil {
		switch left {
		case removeAll:
			w.cleanup(true)
		case removeOwn:
			w.cleanup(false)
		}
		w.s.mu.Lock()
		delete(w.s.open, w.id)
		w.s.mu.Unlock()
		w.s.files.end(w.id)
		return err
	}
	w.s.committed(w.id)
	return nil
}

// persist is the commit point:
//  1. put _committing-<token>;
//  2. put _metadata with If-None-Match: * (every state object's PUT
//     returned before Commit was called): the checkpoint now exists;
//  3. delete the marker. Only now may Commit return nil.
//
// A 412 on the metadata means it exists: if its bytes are ours, an
// earlier attempt of this PUT stored it and only the answer was lost;
// otherwise another writer completed id first (cleanup then leaves the
// metadata). When it cannot be read back it may be ours, so nothing is
// removed. A crash between 2 and 3 leaves metadata beside the marker:
// complete, never reported.
func (w *s3Writer) persist(m Metadata) (onFailure failedCommit, err error) {
	s := w.s
	fail := func(file string, err error) error {
		return &CheckpointError{ID: w.id, File: s3StateKey(w.id, file), Err: err}
	}
	b, err := encodeMetadata(m)
	if err != nil {
		return removeOwn, fail(metadataFile, err)
	}
	marker := s3StateKey(w.id, s3MarkerPrefix+w.token)
	w.mu.Lock()
	w.written = append(w.written, marker)
	w.mu.Unlock()
	if err := s.put(s.prefix+marker, nil, false); err != nil {
		// No metadata was put: the one there, if any, is not ours.
		return removeOwn, fail(s3MarkerPrefix+w.token, err)
	}
	metaKey := s.prefix + s3StateKey(w.id, metadataFile)
	err = s.put(metaKey, b, s.conditional)
	if isPreconditionFailed(err) {
		got, gerr := s.get(metaKey, int64(len(b)))
		switch {
		case gerr != nil:
			// Unknown whose it is: it may be another writer's, or ours
			// with our state objects and marker beside it, so that
			// removing any of them could leave metadata listing objects
			// that are gone.
			return removeNothing, fail(metadataFile, fmt.Errorf("%w: its metadata exists and cannot be read back (%v): %w", ErrExists, gerr, err))
		case !bytes.Equal(got, b):
			return removeOwn, fail(metadataFile, fmt.Errorf("%w: another writer completed checkpoint %d first; one job per checkpoint prefix", ErrExists, w.id))
		}
		err = nil
	}
	if err != nil {
		return removeAll, fail(metadataFile, err)
	}
	if err := s.deleteKey(s.prefix + marker); err != nil {
		// The checkpoint is complete, but it looks never reported: a
		// commit that returns nil must not leave that, so fail it and
		// take the metadata back.
		return removeAll, fail(s3MarkerPrefix+w.token, err)
	}
	return removeAll, nil
}

// failedCommit is what a failed Commit may remove.
type failedCommit int

const (
	// removeAll: the metadata (it may be ours, stored with the answer
	// lost), then the writer's own objects.
	removeAll failedCommit = iota
	// removeOwn: the writer's own objects, not the metadata (another
	// writer's).
	removeOwn
	// removeNothing: whose the metadata is is unknown.
	removeNothing
)

// cleanup removes what the writer put, the metadata first when it may be
// this writer's (a PUT whose answer was lost may have stored it), so that
// a failed Commit leaves no completed checkpoint. When that DELETE fails,
// nothing else is removed: metadata whose state objects were deleted
// would be a damaged checkpoint that Latest must refuse to pass over,
// while the whole checkpoint beside its marker is complete and never
// reported, which resuming may use (sinks commit what it prepared).
func (w *s3Writer) cleanup(withMetadata bool) {
	s := w.s
	if withMetadata {
		if err := s.deleteKey(s.prefix + s3StateKey(w.id, metadataFile)); err != nil {
			s.cfg.logger.Error("checkpoint storage: a failed checkpoint's metadata may be left, so its objects are kept whole; it may be resumed from as a commit that never returned",
				slog.Int64("checkpoint", w.id), slog.String("storage", s.where), slog.Any("error", err))
			return
		}
	}
	w.mu.Lock()
	keys := slices.Clone(w.written)
	w.mu.Unlock()
	for _, k := range keys {
		if err := s.deleteKey(s.prefix + k); err != nil {
			s.cfg.logger.Warn("checkpoint storage: could not remove an object of a failed checkpoint; the next commit removes it",
				slog.Int64("checkpoint", w.id), slog.String("key", s.url(s.prefix+k)), slog.Any("error", err))
		}
	}
}

func (w *s3Writer) Abort() error {
	if err := w.log.abort(); err != nil {
		return err
	}
	w.cleanup(false)
	w.s.mu.Lock()
	delete(w.s.open, w.id)
	w.s.mu.Unlock()
	w.s.files.end(w.id)
	return nil
}

// s3Scan is the checkpoints under the prefix: ids with metadata and
// without, oldest first, and every key of each.
type s3Scan struct {
	complete, incomplete []int64
	keys                 map[int64][]string
}

func (s *S3Storage) scan() (s3Scan, error) {
	objs, err := s.list(dirPrefix)
	if err != nil {
		return s3Scan{}, fmt.Errorf("checkpoint storage %s: %w", s.where, err)
	}
	sc := s3Scan{keys: map[int64][]string{}}
	hasMeta := map[int64]bool{}
	for _, o := range objs {
		dir, base, ok := strings.Cut(o.key, "/")
		if !ok {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimPrefix(dir, dirPrefix), 10, 64)
		if err != nil || id <= 0 || chkDir(id) != dir {
			continue
		}
		sc.keys[id] = append(sc.keys[id], o.key)
		if base == metadataFile {
			hasMeta[id] = true
		}
	}
	for id := range sc.keys {
		if hasMeta[id] {
			sc.complete = append(sc.complete, id)
		} else {
			sc.incomplete = append(sc.incomplete, id)
		}
	}
	slices.Sort(sc.complete)
	slices.Sort(sc.incomplete)
	return sc, nil
}

// committed applies retention and collects unused shared files after
// checkpoint id became durable, as DirStorage.committed does. Failures are
// logged: the checkpoint is complete whatever happens here.
func (s *S3Storage) committed(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, id)
	limit := s.files.end(id)
	sc, err := s.scan()
	if err != nil {
		s.cfg.logger.Warn("checkpoint storage: cannot list checkpoints for cleanup", slog.String("storage", s.where), slog.Any("error", err))
		return
	}
	var remove []int64
	if n := len(sc.complete) - s.cfg.retained; n > 0 {
		remove = append(remove, s.held.notHeld(sc.complete[:n])...)
	}
	for _, old := range sc.incomplete {
		if old < id && !s.open[old] {
			remove = append(remove, old)
		}
	}
	for _, old := range remove {
		// Metadata first, alone: a removal cut short reads as incomplete,
		// not as a damaged checkpoint. The rest in one request.
		var rest []string
		metaGone := true
		for _, k := range sc.keys[old] {
			if k != s3StateKey(old, metadataFile) {
				rest = append(rest, k)
				continue
			}
			if err := s.deleteKey(s.prefix + k); err != nil {
				s.cfg.logger.Warn("checkpoint storage: cannot remove old checkpoint", slog.Int64("checkpoint", old), slog.String("key", s.url(s.prefix+k)), slog.Any("error", err))
				metaGone = false
			}
		}
		if !metaGone {
			continue
		}
		if err := s.deleteKeys(rest); err != nil {
			s.cfg.logger.Warn("checkpoint storage: cannot remove old checkpoint", slog.Int64("checkpoint", old), slog.Any("error", err))
		}
	}
	s.collectFiles(limit)
}

// collectFiles deletes the shared files no completed checkpoint uses, by
// the rule of Storage; nothing when a checkpoint's metadata cannot be read.
func (s *S3Storage) collectFiles(limit uint64) {
	objs, err := s.list(sharedDir + "/")
	if err != nil {
		s.cfg.logger.Warn("checkpoint storage: cannot list shared files for cleanup", slog.String("storage", s.where), slog.Any("error", err))
		return
	}
	if len(objs) == 0 {
		return
	}
	sc, err := s.scan()
	if err != nil {
		s.cfg.logger.Warn("checkpoint storage: cannot list checkpoints for cleanup of shared files", slog.String("storage", s.where), slog.Any("error", err))
		return
	}
	ms := make([]Metadata, 0, len(sc.complete))
	for _, id := range sc.complete {
		m, err := s.readMetadata(id)
		if err != nil {
			s.cfg.logger.Warn("checkpoint storage: not deleting unused shared files, since the shared files of a checkpoint are unknown", slog.Int64("checkpoint", id), slog.Any("error", err))
			return
		}
		ms = append(ms, m)
	}
	var names []string
	for _, o := range objs {
		name := strings.TrimPrefix(o.key, sharedDir+"/")
		if validateFileName(name) == nil {
			names = append(names, name)
		}
	}
	errs := s.files.collect(names, referencedFiles(ms), limit, func(name string) error {
		err := s.deleteKey(s.prefix + sharedPath(name))
		if err == nil {
			s.sizesMu.Lock()
			delete(s.sizes, name)
			s.sizesMu.Unlock()
		}
		return err
	})
	for _, err := range errs {
		s.cfg.logger.Warn("checkpoint storage: cannot remove an unused shared file", slog.Any("error", err))
	}
}

func (s *S3Storage) List() ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, err := s.scan()
	return sc.complete, err
}

func (s *S3Storage) Load(id int64) (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.load(id)
}

func (s *S3Storage) Latest() (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, err := s.scan()
	if err != nil {
		return nil, err
	}
	cp, err := findLatest(s.walk(sc))
	if err != nil {
		return nil, err
	}
	// Resuming commits what it prepared: from now on it counts as
	// reported, so its markers go.
	for _, k := range sc.keys[cp.ID] {
		if strings.HasPrefix(k, s3StateKey(cp.ID, s3MarkerPrefix)) {
			if err := s.deleteKey(s.prefix + k); err != nil {
				return nil, fmt.Errorf("checkpoint storage %s: checkpoint %d: %w", s.where, cp.ID, &CheckpointError{ID: cp.ID, File: k, Err: err})
			}
		}
	}
	for _, id := range sc.incomplete {
		if id > cp.ID && !s.open[id] {
			s.cfg.logger.Info("checkpoint storage: ignoring incomplete checkpoint (no metadata: it never completed)", slog.Int64("checkpoint", id))
		}
	}
	return cp, nil
}

// LatestForInspection returns what Latest would, changing nothing.
func (s *S3Storage) LatestForInspection() (*Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, err := s.scan()
	if err != nil {
		return nil, err
	}
	return findLatest(s.walk(sc))
}

// CommitInterrupted reports whether checkpoint id's metadata is beside the
// commit marker of the writer that wrote it (a commit that never
// returned).
func (s *S3Storage) CommitInterrupted(id int64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, err := s.scan()
	if err != nil {
		return false, err
	}
	return s.neverReported(sc, id)
}

// neverReported: a marker of the writer whose state objects the metadata
// lists is there. Metadata that cannot be decoded (S3 does not tear a PUT,
// so someone altered it) counts as never reported only beside a marker,
// as DirStorage's does.
func (s *S3Storage) neverReported(sc s3Scan, id int64) (bool, error) {
	var markers []string
	for _, k := range sc.keys[id] {
		if t, ok := strings.CutPrefix(k, s3StateKey(id, s3MarkerPrefix)); ok {
			markers = append(markers, t)
		}
	}
	if len(markers) == 0 {
		return false, nil
	}
	m, err := s.readMetadata(id)
	if err != nil || len(m.States) == 0 {
		return true, nil
	}
	tok, _, _ := strings.Cut(m.States[0].File, "-")
	return slices.Contains(markers, tok), nil
}

func (s *S3Storage) walk(sc s3Scan) latestWalk {
	return latestWalk{
		where:         s.where,
		ids:           sc.complete,
		load:          s.load,
		logger:        s.cfg.logger,
		neverReported: func(id int64) (bool, error) { return s.neverReported(sc, id) },
		remedy: func(id, previous int64) string {
			dir := s.url(s.prefix + chkDir(id) + "/")
			shared := s.url(s.prefix + sharedDir + "/")
			if previous == 0 {
				return fmt.Sprintf("restore the objects under %s (and the shared files it lists, under %s) from a backup or an older object version; or, to start afresh and accept that sources start from their beginning again, delete everything under %s", dir, shared, s.where)
			}
			return fmt.Sprintf("restore the objects under %s (and the shared files it lists, under %s) from a backup or an older object version; or, accepting that the output since checkpoint %d is written again, delete %s%s and start again to resume from checkpoint %d. "+
				"An exactly-once Kafka sink may then fail the job with a *txn.DataLossError for transactions of checkpoint %d that were in fact committed (their ids were reused after checkpoint %d), at every restart; "+
				"if so, start afresh on an empty prefix, the sources starting at the offsets `splitflow checkpoints show %s` lists (operator state starts empty)",
				dir, shared, previous, dir, metadataFile, previous, previous, id, s.url(s.prefix+chkDir(previous)))
		},
	}
}

// readMetadata reads and decodes checkpoint id's metadata.
func (s *S3Storage) readMetadata(id int64) (Metadata, error) {
	metaName := s3StateKey(id, metadataFile)
	b, err := s.get(s.prefix+metaName, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return Metadata{}, &CheckpointError{ID: id, File: metaName, Err: ErrNotFound}
	}
	if err != nil {
		return Metadata{}, &CheckpointError{ID: id, File: metaName, Err: err}
	}
	m, err := decodeMetadata(b)
	if err != nil {
		return Metadata{}, &CheckpointError{ID: id, File: metaName, Err: fmt.Errorf("%s: %w", s.url(s.prefix+metaName), err)}
	}
	if m.ID != id {
		return Metadata{}, &CheckpointError{ID: id, File: metaName, Err: fmt.Errorf("%w: metadata of checkpoint %d under the prefix of %d", ErrCorrupt, m.ID, id)}
	}
	return m, nil
}

// ReadMetadata returns checkpoint id's metadata, checked against its own
// checksum only (for tools; Load verifies).
func (s *S3Storage) ReadMetadata(id int64) (Metadata, error) { return s.readMetadata(id) }

// s3LoadConcurrency bounds the state objects read at once while a
// checkpoint is verified.
const s3LoadConcurrency = 8

// load reads and verifies checkpoint id: metadata, every state object
// (read at once, s3LoadConcurrency at a time, and kept), and the presence
// and size of every shared file from one listing.
func (s *S3Storage) load(id int64) (*Checkpoint, error) {
	m, err := s.readMetadata(id)
	if err != nil {
		return nil, err
	}
	read := func(h StateHandle) ([]byte, error) {
		key := s3StateKey(id, h.File)
		data, err := s.get(s.prefix+key, h.Size)
		if err == nil {
			err = verifyBlob(h, data)
			if err != nil {
				err = fmt.Errorf("%s: %w", s.url(s.prefix+key), err)
			}
		} else if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: state object of %s, %s, is missing", ErrCorrupt, h.Owner, s.url(s.prefix+key))
		}
		if err != nil {
			return nil, &CheckpointError{ID: id, File: key, Err: err}
		}
		return data, nil
	}
	verified := make(map[string][]byte, len(m.States))
	var vmu sync.Mutex
	errs := make([]error, len(m.States))
	sem := make(chan struct{}, s3LoadConcurrency)
	var wg sync.WaitGroup
	for i, h := range m.States {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			data, err := read(h)
			if err != nil {
				errs[i] = err
				return
			}
			vmu.Lock()
			verified[h.File] = data
			vmu.Unlock()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if files := m.Files(); len(files) > 0 {
		objs, err := s.list(sharedDir + "/")
		if err != nil {
			return nil, &CheckpointError{ID: id, File: sharedDir, Err: err}
		}
		stored := make(map[string]int64, len(objs))
		for _, o := range objs {
			stored[strings.TrimPrefix(o.key, sharedDir+"/")] = o.size
		}
		for _, f := range files {
			where := s.url(s.prefix + sharedPath(f.Name))
			size, ok := stored[f.Name]
			switch {
			case !ok:
				return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("%w: %s does not exist", ErrMissingFile, where)}
			case size != f.Size:
				return nil, &CheckpointError{ID: id, File: sharedPath(f.Name), Err: fmt.Errorf("%w: shared file %s is %d bytes, the metadata says %d", ErrCorrupt, where, size, f.Size)}
			}
		}
	}
	copyFile := func(h FileHandle, dst string) error {
		key := s.prefix + sharedPath(h.Name)
		where := s.url(key)
		ctx, cancel := s.reqCtx(h.Size)
		defer cancel()
		s.requests.Add(1)
		out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
		if isNotFound(err) {
			return &CheckpointError{ID: id, File: sharedPath(h.Name), Err: fmt.Errorf("%w: %s does not exist", ErrMissingFile, where)}
		}
		if err != nil {
			return &CheckpointError{ID: id, File: sharedPath(h.Name), Err: fmt.Errorf("get %s: %w", where, err)}
		}
		defer out.Body.Close()
		return copyVerified(id, h, out.Body, where, dst)
	}
	return &Checkpoint{Metadata: m, read: read, copyFile: copyFile, verified: verified}, nil
}

// PutFile uploads the local file at path to shared/<name> (multipart when
// larger than a part), unless it is stored already with the local file's
// size. See Storage.
func (s *S3Storage) PutFile(name, path string) (FileHandle, error) {
	if err := validateFileName(name); err != nil {
		return FileHandle{}, err
	}
	s.files.claim(name)
	h, err := s.putFile(name, path)
	outcome := stored
	if err != nil {
		outcome = unchanged
	} else {
		s.sizesMu.Lock()
		s.sizes[name] = h.Size
		s.sizesMu.Unlock()
	}
	s.files.release(name, outcome)
	return h, err
}

func (s *S3Storage) putFile(name, path string) (FileHandle, error) {
	key := s.prefix + sharedPath(name)
	fail := func(err error) (FileHandle, error) {
		return FileHandle{}, fmt.Errorf("checkpoint storage %s: put shared file %s from %s: %w", s.where, name, path, err)
	}
	src, err := os.Open(path)
	if err != nil {
		return fail(err)
	}
	defer src.Close()
	info, err := src.Stat()
	if err != nil {
		return fail(err)
	}
	if !info.Mode().IsRegular() {
		return fail(fmt.Errorf("%s is not a regular file", path))
	}
	// The checksum is the local file's, computed before the upload: the
	// stored copy is verified against it when restored.
	crc := crc32.New(castagnoli)
	n, err := io.Copy(crc, src)
	if err != nil {
		return fail(err)
	}
	if n != info.Size() {
		return fail(fmt.Errorf("%s changed while it was read: %d bytes, then %d", path, info.Size(), n))
	}
	h := FileHandle{Name: name, Size: n, CRC32C: crc.Sum32()}
	switch size, err := s.head(key); {
	case err == nil:
		if size != n {
			return fail(fmt.Errorf("%s is already stored with %d bytes, the local file has %d; shared file names must be unique, and the stored file may be in use", s.url(key), size, n))
		}
		return h, nil
	case !errors.Is(err, fs.ErrNotExist):
		return fail(err)
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	ctx, cancel := s.reqCtx(n)
	defer cancel()
	s.requests.Add(1 + n/s.cfg.s3.partSize)
	if _, err := s.uploader.Upload(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: io.NewSectionReader(src, 0, n), ContentLength: aws.Int64(n)}); err != nil {
		return fail(fmt.Errorf("upload to %s: %w", s.url(key), err))
	}
	s.filesWritten.Add(1)
	return h, nil
}

// Files lists shared/, CRC32C 0 (unknown without reading every object).
func (s *S3Storage) Files() ([]FileHandle, error) {
	objs, err := s.list(sharedDir + "/")
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage %s: list shared files: %w", s.where, err)
	}
	var out []FileHandle
	for _, o := range objs {
		name := strings.TrimPrefix(o.key, sharedDir+"/")
		if validateFileName(name) == nil {
			out = append(out, FileHandle{Name: name, Size: o.size})
		}
	}
	slices.SortFunc(out, func(a, b FileHandle) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteFile removes shared/<name>. See Storage.
func (s *S3Storage) DeleteFile(name string) error {
	if err := validateFileName(name); err != nil {
		return err
	}
	s.files.claim(name)
	err := s.deleteKey(s.prefix + sharedPath(name))
	outcome := gone
	if err != nil {
		outcome = unchanged
		err = fmt.Errorf("checkpoint storage %s: delete shared file: %w", s.where, err)
	} else {
		s.sizesMu.Lock()
		delete(s.sizes, name)
		s.sizesMu.Unlock()
	}
	s.files.release(name, outcome)
	return err
}

// Hold keeps checkpoint id from retention until release (Holder).
func (s *S3Storage) Hold(id int64) (release func()) { return s.held.hold(&s.mu, id) }
