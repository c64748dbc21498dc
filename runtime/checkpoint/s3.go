package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
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
// server: MinIO, SeaweedFS, Ceph RGW, R2) under a prefix: a BlobStorage
// whose keys are object keys under the prefix (see BlobStorage for the
// layout), shared files uploaded in parts when large:
//
//	PREFIX/chk-7/3f9a0c1d-0001-source-0.state   state blobs; the writer's token first
//	PREFIX/chk-7/_committing-3f9a0c1d           only while Commit runs
//	PREFIX/chk-7/_metadata                      written last, If-None-Match: *
//	PREFIX/shared/000012.sst                    shared files (PutFile), multipart when large
//	PREFIX/records/owner                        records (RecordStorage), If-None-Match: *
//
// A PUT is atomic: an object is either absent or whole, and S3 reads after
// a successful PUT see it. The conditional create is a PUT with
// If-None-Match: *, where the server honours it (probed when the storage
// opens, ConditionalWrites); a 412 on a retried PUT whose first attempt
// stored our own bytes is success. Where the server ignores it, the
// metadata is a plain PUT (the last writer of an id wins) and records
// are refused. A server whose listings do not show a PUT that returned
// is refused when the storage opens (ErrInconsistentListings).
//
// There is no lock: S3 offers no lease that a killed process gives up.
// One job per prefix is the owner record's to ensure (ClaimOwner);
// conditional writes keep a second writer from overwriting a completed
// checkpoint, but its cleanup may still delete the first one's
// checkpoints in progress and shared files.
type S3Storage struct {
	*BlobStorage

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
	s := &S3Storage{bucket: bucket, prefix: prefix, where: "s3://" + bucket + "/" + prefix, cfg: cfg}
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
	s.BlobStorage = newBlobStorage(s3Blob{s}, cfg)
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
	return s.putBody(key, bytes.NewReader(body), int64(len(body)), ifAbsent)
}

func (s *S3Storage) putBody(key string, body io.ReadSeeker, size int64, ifAbsent bool) error {
	ctx, cancel := s.reqCtx(size)
	defer cancel()
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: body, ContentLength: aws.Int64(size)}
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

// s3Blob is the Blob of an S3Storage: keys under its prefix.
type s3Blob struct{ s *S3Storage }

func (b s3Blob) Open(key string, size int64) (io.ReadCloser, error) {
	s := b.s
	key = s.prefix + key
	ctx, cancel := s.reqCtx(size)
	s.requests.Add(1)
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if isNotFound(err) {
		cancel()
		return nil, fmt.Errorf("%s: %w", s.url(key), fs.ErrNotExist)
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("get %s: %w", s.url(key), err)
	}
	return &cancelOnClose{ReadCloser: out.Body, cancel: cancel}, nil
}

// cancelOnClose ends a GET's context with its body.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// Create PUTs the object, uploading it in parts (WithS3PartSize) when it
// is larger than one part.
func (b s3Blob) Create(key string, r io.Reader, size int64) error {
	s := b.s
	key = s.prefix + key
	if size < s.cfg.s3.partSize {
		body, ok := r.(io.ReadSeeker)
		if !ok {
			data, err := io.ReadAll(io.LimitReader(r, size))
			if err != nil {
				return fmt.Errorf("put %s: %w", s.url(key), err)
			}
			body = bytes.NewReader(data)
		}
		return s.putBody(key, body, size, false)
	}
	ctx, cancel := s.reqCtx(size)
	defer cancel()
	s.requests.Add(1 + size/s.cfg.s3.partSize)
	if _, err := s.uploader.Upload(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: r, ContentLength: aws.Int64(size)}); err != nil {
		return fmt.Errorf("upload to %s: %w", s.url(key), err)
	}
	return nil
}

// CreateIfAbsent PUTs with If-None-Match: *; a 412 is fs.ErrExist.
func (b s3Blob) CreateIfAbsent(key string, data []byte) error {
	s := b.s
	if !s.conditional {
		return fmt.Errorf("%w (If-None-Match: * was ignored when the storage opened); use an S3 server that honours it", ErrNoConditionalWrites)
	}
	err := s.put(s.prefix+key, data, true)
	if isPreconditionFailed(err) {
		return fmt.Errorf("%w: %w", fs.ErrExist, err)
	}
	return err
}

func (b s3Blob) Stat(key string) (int64, error) { return b.s.head(b.s.prefix + key) }

func (b s3Blob) List(prefix string) ([]BlobObject, error) {
	objs, err := b.s.list(prefix)
	if err != nil {
		return nil, err
	}
	out := make([]BlobObject, len(objs))
	for i, o := range objs {
		out[i] = BlobObject{Key: o.key, Size: o.size}
	}
	return out, nil
}

func (b s3Blob) Delete(key string) error { return b.s.deleteKey(b.s.prefix + key) }

// deleteKeys deletes with DeleteObjects, 1000 keys a request.
func (b s3Blob) deleteKeys(keys []string) error { return b.s.deleteKeys(keys) }

func (b s3Blob) Location(key string) string {
	if key == "" {
		return b.s.where
	}
	return b.s.url(b.s.prefix + key)
}
