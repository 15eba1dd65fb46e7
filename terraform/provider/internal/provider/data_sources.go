package provider

import (
	"context"
	"net/url"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// -- meridian_regions -------------------------------------------------------------------

func newRegionsDataSource() datasource.DataSource { return &regionsDataSource{} }

type regionsDataSource struct{ dataBase }

var regionType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"name": types.StringType, "display_name": types.StringType,
}}

func (d *regionsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_regions"
}

func (d *regionsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Every region of the control plane (readable by every caller: it is where topics can go).",
		Attributes: map[string]schema.Attribute{
			"names": schema.ListAttribute{Computed: true, ElementType: types.StringType,
				Description: "The regions' names, sorted."},
			"regions": schema.ListNestedAttribute{Computed: true, Description: "The regions, by name.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"name":         schema.StringAttribute{Computed: true, Description: "The region's name."},
					"display_name": schema.StringAttribute{Computed: true, Description: "Its display name."},
				}}},
		},
	}
}

func (d *regionsDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	type regionJSON struct {
		Name        string `json:"name"`
		DisplayName string `json:"display_name"`
	}
	regions, err := List[regionJSON](ctx, d.client, "regions", url.Values{"ordering": {"name"}})
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not list the regions", err, nil)
		return
	}
	names := make([]string, 0, len(regions))
	objects := make([]attr.Value, 0, len(regions))
	for _, region := range regions {
		names = append(names, region.Name)
		objects = append(objects, types.ObjectValueMust(regionType.AttrTypes, map[string]attr.Value{
			"name": types.StringValue(region.Name), "display_name": types.StringValue(region.DisplayName),
		}))
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, struct {
		Names   types.List `tfsdk:"names"`
		Regions types.List `tfsdk:"regions"`
	}{listOf(names), types.ListValueMust(regionType, objects)})...)
}

// -- meridian_clusters ------------------------------------------------------------------

func newClustersDataSource() datasource.DataSource { return &clustersDataSource{} }

type clustersDataSource struct{ dataBase }

var brokerType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"broker_id": types.Int64Type, "address": types.StringType, "kafka_address": types.StringType,
	"phase": types.StringType,
}}

var clusterType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"id": types.Int64Type, "region": types.StringType, "name": types.StringType,
	"provisioner": types.StringType, "broker_count": types.Int64Type,
	"remote_store_uri": types.StringType, "status": types.StringType,
	"brokers": types.ListType{ElemType: brokerType},
}}

func (d *clustersDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_clusters"
}

func (d *clustersDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	brokerAttributes := map[string]schema.Attribute{
		"broker_id":     schema.Int64Attribute{Computed: true, Description: "The broker's id in its cluster."},
		"address":       schema.StringAttribute{Computed: true, Description: "Its gRPC address, `host:port`."},
		"kafka_address": schema.StringAttribute{Computed: true, Description: "Its Kafka listener's address (\"\": none)."},
		"phase":         schema.StringAttribute{Computed: true, Description: "`starting`, `ready`, `unreachable`, ..."},
	}
	resp.Schema = schema.Schema{
		Description: "The clusters of the control plane with their brokers (platform administrators only).",
		Attributes: map[string]schema.Attribute{
			"region": schema.StringAttribute{Optional: true, Description: "Only this region's clusters."},
			"clusters": schema.ListNestedAttribute{Computed: true, Description: "The clusters.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"id":               schema.Int64Attribute{Computed: true, Description: "The cluster's id."},
					"region":           schema.StringAttribute{Computed: true, Description: "Its region."},
					"name":             schema.StringAttribute{Computed: true, Description: "Its name."},
					"provisioner":      schema.StringAttribute{Computed: true, Description: "`local`, `static` or `kubernetes`."},
					"broker_count":     schema.Int64Attribute{Computed: true, Description: "Brokers it should have."},
					"remote_store_uri": schema.StringAttribute{Computed: true, Description: "Its object store (\"\": none)."},
					"status":           schema.StringAttribute{Computed: true, Description: "Its provisioning status."},
					"brokers": schema.ListNestedAttribute{Computed: true, Description: "Its brokers.",
						NestedObject: schema.NestedAttributeObject{Attributes: brokerAttributes}},
				}}},
		},
	}
}

func (d *clustersDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var config struct {
		Region   types.String `tfsdk:"region"`
		Clusters types.List   `tfsdk:"clusters"`
	}
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	type brokerJSON struct {
		BrokerID     int64  `json:"broker_id"`
		Address      string `json:"address"`
		KafkaAddress string `json:"kafka_address"`
		Phase        string `json:"phase"`
	}
	type clusterJSON struct {
		ID             int64        `json:"id"`
		Region         string       `json:"region"`
		Name           string       `json:"name"`
		Provisioner    string       `json:"provisioner"`
		BrokerCount    int64        `json:"broker_count"`
		RemoteStoreURI string       `json:"remote_store_uri"`
		Status         string       `json:"status"`
		Brokers        []brokerJSON `json:"brokers"`
	}
	query := url.Values{"ordering": {"name"}}
	if known(config.Region) {
		query.Set("region", config.Region.ValueString())
	}
	clusters, err := List[clusterJSON](ctx, d.client, "clusters", query)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not list the clusters", err, nil)
		return
	}
	objects := make([]attr.Value, 0, len(clusters))
	for _, c := range clusters {
		brokers := make([]attr.Value, 0, len(c.Brokers))
		for _, b := range c.Brokers {
			brokers = append(brokers, types.ObjectValueMust(brokerType.AttrTypes, map[string]attr.Value{
				"broker_id": types.Int64Value(b.BrokerID), "address": types.StringValue(b.Address),
				"kafka_address": types.StringValue(b.KafkaAddress), "phase": types.StringValue(b.Phase),
			}))
		}
		objects = append(objects, types.ObjectValueMust(clusterType.AttrTypes, map[string]attr.Value{
			"id": types.Int64Value(c.ID), "region": types.StringValue(c.Region), "name": types.StringValue(c.Name),
			"provisioner": types.StringValue(c.Provisioner), "broker_count": types.Int64Value(c.BrokerCount),
			"remote_store_uri": types.StringValue(c.RemoteStoreURI), "status": types.StringValue(c.Status),
			"brokers": types.ListValueMust(brokerType, brokers),
		}))
	}
	config.Clusters = types.ListValueMust(clusterType, objects)
	resp.Diagnostics.Append(resp.State.Set(ctx, config)...)
}

// -- meridian_topics --------------------------------------------------------------------

func newTopicsDataSource() datasource.DataSource { return &topicsDataSource{} }

type topicsDataSource struct{ dataBase }

var topicSummaryType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"full_name": types.StringType, "tenant": types.StringType, "name": types.StringType,
	"region": types.StringType, "cluster": types.StringType, "partitions": types.Int64Type,
	"replication_factor": types.Int64Type, "retention_ms": types.Int64Type,
	"remote_storage": types.BoolType, "mirror_of": types.StringType, "status": types.StringType,
}}

func (d *topicsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_topics"
}

func (d *topicsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The topics the credentials see (a tenant's own; every tenant's for a platform administrator), " +
			"origins and mirror copies, in every region.",
		Attributes: map[string]schema.Attribute{
			"tenant": schema.StringAttribute{Optional: true, Description: "Only this tenant's topics."},
			"region": schema.StringAttribute{Optional: true, Description: "Only the topics in this region."},
			"names": schema.ListAttribute{Computed: true, ElementType: types.StringType,
				Description: "The full names, sorted (a mirror copy's name appears once per region)."},
			"topics": schema.ListNestedAttribute{Computed: true, Description: "The topics, by full name.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"full_name":          schema.StringAttribute{Computed: true, Description: "`<tenant>.<name>`."},
					"tenant":             schema.StringAttribute{Computed: true, Description: "The tenant's slug."},
					"name":               schema.StringAttribute{Computed: true, Description: "The name after `<tenant>.`."},
					"region":             schema.StringAttribute{Computed: true, Description: "Its region."},
					"cluster":            schema.StringAttribute{Computed: true, Description: "Its cluster."},
					"partitions":         schema.Int64Attribute{Computed: true, Description: "Its partitions."},
					"replication_factor": schema.Int64Attribute{Computed: true, Description: "Its replication factor."},
					"retention_ms":       schema.Int64Attribute{Computed: true, Description: "Its retention in ms."},
					"remote_storage":     schema.BoolAttribute{Computed: true, Description: "Whether it is tiered."},
					"mirror_of":          schema.StringAttribute{Computed: true, Description: "A mirror copy: its origin's region (null: an origin)."},
					"status":             schema.StringAttribute{Computed: true, Description: "Its provisioning status."},
				}}},
		},
	}
}

func (d *topicsDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var config struct {
		Tenant types.String `tfsdk:"tenant"`
		Region types.String `tfsdk:"region"`
		Names  types.List   `tfsdk:"names"`
		Topics types.List   `tfsdk:"topics"`
	}
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	type summaryJSON struct {
		topicJSON
		MirrorOf *string `json:"mirror_of"`
	}
	query := url.Values{"ordering": {"full_name"}}
	if known(config.Tenant) {
		query.Set("tenant", config.Tenant.ValueString())
	}
	if known(config.Region) {
		query.Set("region", config.Region.ValueString())
	}
	topics, err := List[summaryJSON](ctx, d.client, "topics", query)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not list the topics", err, nil)
		return
	}
	names := make([]string, 0, len(topics))
	objects := make([]attr.Value, 0, len(topics))
	for _, t := range topics {
		names = append(names, t.FullName)
		objects = append(objects, types.ObjectValueMust(topicSummaryType.AttrTypes, map[string]attr.Value{
			"full_name": types.StringValue(t.FullName), "tenant": types.StringValue(t.Tenant),
			"name": types.StringValue(t.Name), "region": types.StringValue(t.Region),
			"cluster": types.StringValue(t.Cluster), "partitions": types.Int64Value(t.Partitions),
			"replication_factor": types.Int64Value(t.ReplicationFactor),
			"retention_ms":       types.Int64Value(t.RetentionMs), "remote_storage": types.BoolValue(t.RemoteStorage),
			"mirror_of": stringOrNull(t.MirrorOf), "status": types.StringValue(t.Status),
		}))
	}
	config.Names = listOf(names)
	config.Topics = types.ListValueMust(topicSummaryType, objects)
	resp.Diagnostics.Append(resp.State.Set(ctx, config)...)
}
